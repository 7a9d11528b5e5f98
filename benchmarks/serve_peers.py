"""This server among its peers: the same ONNX model behind lightning_cls's server, MLServer,
KServe's Python model server and the seed's FastAPI tutorial server, driven by Debian's ``wrk``.

On the same cores, one server at a time (start order rotated each round), each gets the same
load: ``wrk`` (``wrk_oip.lua``) posting one Open Inference Protocol v2 JSON infer body (one
normalized FP32 image) to the servers that speak OIP, and one PNG to the tutorial server's
``/predict`` (its only door). Per server and model, at 1, 16 and 64 connections: answered
requests per second, wrk's p50/p99 latency, the server's CPU seconds (its whole process tree)
per 1,000 images, and errors (non-2xx answers, socket errors). Every server's answer is checked
against in-process onnxruntime logits (the tutorial's top label against their argmax) before it
is measured. Medians and ranges over rounds; the last line is one JSON object.

The peers run in environments of their own (their pins clash with the project's):
``make venv-peers`` creates ``.venv-mlserver`` (mlserver 1.7.1) and ``.venv-kserve`` (kserve
0.21.0), each with the project's onnxruntime; ``benchmarks/peers/`` holds their model classes.
All four run the model on onnxruntime with the same settings (full graph optimization, intra-op
threads = the machine's cores, no spinning); the tutorial server runs eager PyTorch at batch 1,
as the tutorial does. MLServer's adaptive batching is on (``--mls-batch-size``,
``--mls-batch-time``); KServe's Python server has no batching of its own.

    python benchmarks/serve_peers.py                  # 3 rounds, simplecnn + resnet18, 10 s each
    python benchmarks/serve_peers.py --quick          # smoke: 1 round, simplecnn, 1 s, 1 and 4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import numpy as np
import psutil
from serve_setup import SERVE_BASE, Server, free_port, make_model, png_images
from soak import oip_body

from lightning_cls.inference import load_artifact

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS = ("lightning_cls", "mlserver", "kserve", "fastapi_tutorial")
VENVS = {"mlserver": ROOT / ".venv-mlserver", "kserve": ROOT / ".venv-kserve"}
GOAL_RATIO, GOAL_P99_MS = 2.0, 50.0  # issue 54: >= 2x the best peer at 64, p99 <= 50 ms at 16


class PeerServer(Server):
    """A server process (``serve_setup.Server``) with the health path and door of its kind."""

    def __init__(self, kind: str, cmd: list[str], run_dir: Path, port: int, env: dict):
        self.kind = kind
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        run_dir.mkdir(parents=True, exist_ok=True)
        self.log = run_dir / "server.log"
        self.cmd = cmd
        self.proc = subprocess.Popen(
            cmd, stdout=self.log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=run_dir
        )
        self.is_tutorial = kind == "fastapi_tutorial"
        self.litserve_echo = False
        self.is_bare = kind != "lightning_cls"
        self.health = {"lightning_cls": "/health", "fastapi_tutorial": "/docs"}.get(
            kind, "/v2/health/ready"
        )

    def cpu_seconds(self) -> float:
        total = 0.0
        for p in self._tree():
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total


def peer_env() -> dict:
    env = dict(os.environ)
    env["LCLS_ORT_THREADS"] = str(os.cpu_count() or 1)
    env["OMP_NUM_THREADS"] = str(os.cpu_count() or 1)
    return env


def start(kind: str, model: dict, work: Path, args) -> PeerServer:
    """``kind``'s server for ``model`` (``serve_setup.make_model``'s dict), not yet ready."""
    port, env, run_dir = free_port(), peer_env(), work / f"{kind}_{model['name']}"
    if kind == "lightning_cls":
        cmd = [sys.executable, "-m", "lightning_cls.serve", f"ckpt_path={model['onnx']}",
               f"serve.port={port}", f"hydra.run.dir={run_dir}", *SERVE_BASE]  # fmt: skip
    elif kind == "fastapi_tutorial":
        weights = model["weights"]
        cmd = [sys.executable, str(HERE / "tutorial_server.py"), str(weights),
               str(weights.with_suffix(".json")), str(port)]  # fmt: skip
    elif kind == "mlserver":
        folder = run_dir / "models" / model["name"]
        folder.mkdir(parents=True, exist_ok=True)
        settings = {
            "name": model["name"],
            "implementation": "mlserver_onnx.OnnxClassifier",
            "parameters": {"uri": str(model["onnx"])},
            "max_batch_size": args.mls_batch_size,
            "max_batch_time": args.mls_batch_time,
        }
        (folder / "model-settings.json").write_text(json.dumps(settings))
        server = {"http_port": port, "grpc_port": free_port(), "metrics_port": free_port(),
                  "debug": False}  # fmt: skip
        (run_dir / "models" / "settings.json").write_text(json.dumps(server))
        env["PYTHONPATH"] = str(HERE / "peers")  # its own environment and the runtime's files
        cmd = [str(VENVS["mlserver"] / "bin" / "mlserver"), "start", str(run_dir / "models")]
    elif kind == "kserve":
        env.pop("PYTHONPATH", None)  # its own environment only
        cmd = [str(VENVS["kserve"] / "bin" / "python"), str(HERE / "peers" / "kserve_onnx.py"),
               str(model["onnx"]), model["name"], str(port)]  # fmt: skip
    else:
        raise ValueError(f"unknown server {kind!r}; known: {', '.join(PEERS)}")
    return PeerServer(kind, cmd, run_dir, port, env)


def door(kind: str, model: dict) -> tuple[Path, str, str]:
    """(body file, path, content type) of the request ``kind`` is driven with."""
    if kind == "fastapi_tutorial":
        return model["png_file"], "/predict", "image/png"
    return model["oip_file"], f"/v2/models/{model['name']}/infer", "application/json"


def check_answer(kind: str, server: PeerServer, model: dict) -> None:
    """The served answer equals in-process onnxruntime's (the load is not of errors)."""
    body_file, path, content_type = door(kind, model)
    answer = httpx.post(server.url + path, content=body_file.read_bytes(),
                        headers={"content-type": content_type}, timeout=60)  # fmt: skip
    if answer.status_code != 200:
        raise RuntimeError(f"{kind}: {answer.status_code} {answer.text[:500]}")
    expected = model["logits"]
    if kind == "fastapi_tutorial":
        top = answer.json()["labels"][0]
        if top != model["classes"][int(expected.argmax())]:
            raise RuntimeError(f"{kind}: top label {top!r} differs from onnxruntime's")
        return
    outputs = {o["name"]: o for o in answer.json()["outputs"]}
    np.testing.assert_allclose(outputs["logits"]["data"], expected.ravel(), atol=1e-4)


def wrk(server: PeerServer, kind: str, model: dict, connections: int, seconds: float) -> dict:
    body_file, path, content_type = door(kind, model)
    command = ["wrk", f"-t{min(2, connections)}", f"-c{connections}", f"-d{seconds:g}s",
               "-s", str(HERE / "wrk_oip.lua"), server.url, "--", str(body_file), path,
               content_type]  # fmt: skip
    cpu_before = server.cpu_seconds()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    cpu = server.cpu_seconds() - cpu_before
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{proc.stderr[-2000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    ok = summary["requests"] - summary["non_2xx_3xx"]
    return {
        "rps": ok / (summary["duration_us"] / 1e6),
        "p50_ms": summary["p50_ms"],
        "p99_ms": summary["p99_ms"],
        "cpu_s_per_1000": 1000 * cpu / ok if ok else float("nan"),
        "errors": summary["non_2xx_3xx"] + summary["socket_errors"],
    }


def make_models(names: list[str], work: Path, image_size: int) -> list[dict]:
    models = []
    for name in names:
        data = make_model(name, work / name, image_size)
        predictor = load_artifact(data["onnx"])
        x = predictor.spec.preprocess(data["images"][:1].numpy()).astype(np.float32)
        data.update(name=name, logits=predictor.tta_logits(x))
        data["oip_file"] = work / name / "oip_body.json"
        data["oip_file"].write_bytes(oip_body(x[0]))
        data["png_file"] = work / name / "image.png"
        data["png_file"].write_bytes(png_images(data["images"][:1])[0])
        models.append(data)
    return models


def available(kinds: list[str]) -> tuple[list[str], dict[str, str]]:
    """The servers that can run here, and why each other one cannot."""
    missing = {}
    for kind in kinds:
        venv = VENVS.get(kind)
        if venv is not None and not (venv / "bin" / "python").exists():
            missing[kind] = f"{venv.name} not found; create it with `make venv-peers`"
    return [k for k in kinds if k not in missing], missing


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 2), "min": round(min(values), 2),
            "max": round(max(values), 2)}  # fmt: skip


def summarize(rows: dict, kinds: list[str], models: list[str], levels: list[int]) -> dict:
    table: dict = {}
    for (model, kind, c), runs in rows.items():
        entry = {"rps": spread([r["rps"] for r in runs])}
        for key in ("p50_ms", "p99_ms", "cpu_s_per_1000"):
            entry[key] = round(statistics.median(r[key] for r in runs), 2)
        entry["errors"] = sum(r["errors"] for r in runs)
        table.setdefault(model, {}).setdefault(kind, {})[str(c)] = entry
    goal = {}
    top, mid = max(levels), sorted(levels)[len(levels) // 2]
    for model in models:
        mine = table[model].get("lightning_cls", {})
        peers = [table[model][k][str(top)]["rps"]["median"] for k in kinds if k != "lightning_cls"]
        if mine and peers:
            ratio = mine[str(top)]["rps"]["median"] / max(peers)
            # Per round: this server's req/s over the best peer's in the same round (rows keep
            # each server's rounds in order).
            others = [rows[(model, k, top)] for k in kinds if k != "lightning_cls"]
            per_round = [
                ours["rps"] / max(peer[i]["rps"] for peer in others)
                for i, ours in enumerate(rows[(model, "lightning_cls", top)])
            ]
            goal[model] = {
                f"over_best_peer_at_{top}": round(ratio, 2),  # of the medians over rounds
                f"over_best_peer_at_{top}_per_round": spread(per_round),
                f"p99_ms_at_{mid}": mine[str(mid)]["p99_ms"],
                "met": ratio >= GOAL_RATIO and mine[str(mid)]["p99_ms"] <= GOAL_P99_MS,
            }
    return {"table": table, "goal": goal}


def print_table(table: dict) -> None:
    print(
        "| model | server | clients | req/s median [range] | p50 ms | p99 ms | CPU s/1k img | errors |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for model, kinds in table.items():
        for kind, levels in kinds.items():
            for c, e in levels.items():
                r = e["rps"]
                print(f"| {model} | {kind} | {c} | {r['median']:.0f} [{r['min']:.0f}, {r['max']:.0f}]"
                      f" | {e['p50_ms']:.1f} | {e['p99_ms']:.1f} | {e['cpu_s_per_1000']:.2f} |"
                      f" {e['errors']} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke: 1 round, simplecnn, 1 s")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    parser.add_argument("--clients", default="1,16,64", help="wrk connection counts")
    parser.add_argument("--models", default="simplecnn,resnet18")
    parser.add_argument("--servers", default=",".join(PEERS))
    parser.add_argument("--mls-batch-size", type=int, default=32, help="MLServer max_batch_size")
    parser.add_argument("--mls-batch-time", type=float, default=0.005,
                        help="MLServer max_batch_time, seconds")  # fmt: skip
    parser.add_argument("--keep-logs", action="store_true", help="print each server's log")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("error: wrk not found on PATH; install it (Debian: apt-get install -y wrk)")
    if args.quick:
        args.rounds, args.seconds, args.clients, args.models = 1, 1.0, "1,4", "simplecnn"
    levels = [int(c) for c in args.clients.split(",")]
    wanted = args.servers.split(",")
    unknown = sorted(set(wanted) - set(PEERS))
    if unknown:
        sys.exit(f"error: unknown server(s) {unknown}; known: {', '.join(PEERS)}")
    kinds, missing = available(wanted)
    for kind, why in missing.items():
        print(f"skipped {kind}: {why}", file=sys.stderr)
    rows: dict = {}
    loads = []
    with tempfile.TemporaryDirectory(prefix="serve_peers_") as tmp:
        work = Path(tmp)
        models = make_models(args.models.split(","), work, 16 if args.quick else 32)
        for r in range(args.rounds):
            order = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]  # rotated each round
            for model in models:
                for kind in order:
                    server = start(kind, model, work / f"round{r}", args)
                    try:
                        server.wait_ready()
                        check_answer(kind, server, model)
                        wrk(server, kind, model, max(levels), min(2.0, args.seconds))  # warm-up
                        for c in levels:
                            loads.append(os.getloadavg()[0])
                            row = wrk(server, kind, model, c, args.seconds)
                            rows.setdefault((model["name"], kind, c), []).append(row)
                    finally:
                        server.stop()
                        if args.keep_logs:
                            print(server.log.read_text()[-3000:], file=sys.stderr)
    out = summarize(rows, kinds, [m["name"] for m in models], levels)
    print_table(out["table"])
    out.update(
        servers=kinds,
        missing=missing,
        rounds=args.rounds,
        seconds=args.seconds,
        clients=levels,
        mlserver_batching={
            "max_batch_size": args.mls_batch_size,
            "max_batch_time_s": args.mls_batch_time,
        },  # fmt: skip
        loadavg_1m=[round(v, 2) for v in loads],
        cpus=os.cpu_count(),
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
