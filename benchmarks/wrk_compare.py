"""The project's load tool against wrk on the same server and request: do they agree?

One ``python -m lightning_cls.serve`` (SimpleCNN with random weights, ONNX, the defaults and
``serve_setup.SERVE_BASE``, as ``serve_load.py`` starts it), asked the same Open Inference
Protocol infer body (``soak.oip_body``: one normalized FP32 image as JSON) by A, the project's
load tool (``serve_load.load`` on ``http_client.Connection``), and B, Debian's ``wrk`` with
``wrk_oip.lua``; both at the same connection count for the same seconds, interleaved
(A, B, A, B, ...). One served answer is checked against the in-process runtime's logits first.
Reported: answered-200 requests per second per round, median and range, each tool's own CPU
(cores) and median latency as it sees it, and the 1-minute load average at each measurement
(the machine is shared). Last line: one JSON object.

    python benchmarks/wrk_compare.py              # 3 rounds, 16 connections, 20 s each
    python benchmarks/wrk_compare.py --quick      # smoke: 1 round, 4 connections, 1 s each

wrk must be on PATH (Debian: ``apt-get install -y wrk``); without it the script exits 1 naming
the fix.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import serve_load
from http_client import Connection
from serve_setup import SERVE_BASE, Server, make_model
from soak import oip_body

from lightning_cls.inference import load_artifact

HERE = Path(__file__).resolve().parent
OIP_PATH = "/v2/models/simplecnn/infer"
AGREE = 0.10  # the tools agree when their medians differ by at most this share


class _OIPConnection(Connection):
    """``serve_load.load`` posts to ``/predict``; this connection sends its posts to the OIP
    infer path instead, so the tool's loop, warm-up and counting run unchanged."""

    def post(self, path: str, body: bytes, content_type: str):
        return super().post(OIP_PATH, body, content_type)


def project_tool(url: str, body: bytes, connections: int, seconds: float) -> dict:
    """A: the project's load tool on the OIP body; 200s per second and its CPU in cores."""
    serve_load.Connection = _OIPConnection  # read by load when it opens its connections
    out = asyncio.run(
        serve_load.load(url, [body], None, [], connections, seconds, 0.3, "application/json")
    )
    keys = ("rps", "client_cpu_cores", "codes", "p50_ms", "p99_ms")
    return {key: out[key] for key in keys}


def wrk_command(url: str, body_file: Path, connections: int, seconds: float) -> list[str]:
    threads = min(2, connections)
    return ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds:g}s",
            "-s", str(HERE / "wrk_oip.lua"), url, "--", str(body_file), OIP_PATH]  # fmt: skip


def wrk_tool(command: list[str], seconds: float) -> dict:
    """B: wrk; its 200s (requests less non-2xx/3xx) per second and its CPU in cores."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{proc.stderr[-2000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    ok = summary["requests"] - summary["non_2xx_3xx"]
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {
        "rps": ok / (summary["duration_us"] / 1e6),
        "client_cpu_cores": cpu / wall,
        "p50_ms": summary["p50_ms"],
        "p99_ms": summary["p99_ms"],
        "summary": summary,
        "output": proc.stdout,
    }


def checked(url: str, body: bytes, expected: np.ndarray) -> None:
    """One served answer equals the in-process runtime's logits (the load is not of errors)."""
    answer = httpx.post(url + OIP_PATH, content=body, timeout=30)
    answer.raise_for_status()
    outputs = {o["name"]: o for o in answer.json()["outputs"]}
    np.testing.assert_allclose(outputs["logits"]["data"], expected.ravel(), atol=1e-4)


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "per_round": [round(v, 1) for v in values]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke: 1 round, 4 connections, 1 s")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0, help="per measurement")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("error: wrk not found on PATH; install it (Debian: apt-get install -y wrk)")
    if args.quick:
        args.rounds, args.connections, args.seconds = 1, 4, 1.0
    image_size = 16 if args.quick else 32
    with tempfile.TemporaryDirectory(prefix="wrk_compare_") as tmp:
        work = Path(tmp)
        data = make_model("simplecnn", work / "simplecnn", image_size)
        predictor = load_artifact(data["onnx"])
        x = predictor.spec.preprocess(data["images"][:1].numpy()).astype(np.float32)
        body = oip_body(x[0])  # (C, H, W) normalized -> OIP JSON
        body_file = work / "oip_body.json"
        body_file.write_bytes(body)
        server = Server(data["onnx"], work / "serve", *SERVE_BASE)
        try:
            server.wait_ready()
            checked(server.url, body, predictor.tta_logits(x))
            command = wrk_command(server.url, body_file, args.connections, args.seconds)
            rows = {"project": [], "wrk": []}
            loads, wrk_output = [], ""
            for _ in range(args.rounds):
                loads.append(os.getloadavg()[0])
                rows["project"].append(
                    project_tool(server.url, body, args.connections, args.seconds)
                )
                loads.append(os.getloadavg()[0])
                row = wrk_tool(command, args.seconds)
                wrk_output = row.pop("output")
                rows["wrk"].append(row)
        finally:
            server.stop()
    out = {name: spread([r["rps"] for r in runs]) for name, runs in rows.items()}
    for name, runs in rows.items():
        for key in ("client_cpu_cores", "p50_ms"):  # medians over rounds
            out[name][key] = round(statistics.median(r[key] for r in runs), 2)
    ratio = out["wrk"]["median"] / out["project"]["median"]
    errors = [r["codes"] for r in rows["project"]] + [r["summary"] for r in rows["wrk"]]
    out.update(
        wrk_over_project=round(ratio, 3),
        agree=abs(ratio - 1) <= AGREE,
        loadavg_1m=[round(v, 2) for v in loads],
        connections=args.connections,
        seconds=args.seconds,
        rounds=args.rounds,
        wrk_command=" ".join(
            ["wrk", *command[1:5], "benchmarks/wrk_oip.lua", "URL", "--", "BODY_FILE", OIP_PATH]
        ),  # fmt: skip
        errors=errors,
    )
    print(wrk_output.strip())  # wrk's own report of the last round
    print(json.dumps(out))


if __name__ == "__main__":
    main()
