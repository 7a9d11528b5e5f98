"""Load benchmark of ``python -m lightning_cls.serve`` against the tutorial server.

Bounded asyncio load on 127.0.0.1 from a minimal keep-alive HTTP/1.1 client
(``http_client.py``; httpx itself capped every server at ~100 req/s on 2 cores), on servers
started here and measured in interleaved rounds; the servers not being measured are suspended
(SIGSTOP) so they take no CPU. The load generator's own CPU (seconds of CPU per second of
wall time, in cores) is reported beside each measurement: on 2 cores it shares the machine
with the server. Servers: an HTTP-only echo server (the ceiling on this machine), LitServe with
a no-op API (``litserve_echo.py``, only where litserve is installed: why the engine left it),
the FastAPI tutorial server (``tutorial_server.py``, batch 1, eager), lightning_cls serve
(the default engine and settings, "dynamic"), the same with ``max_batch_size=1``, with ONNX
Runtime's thread spinning on, with one intra-op thread, with two worker processes, eager
PyTorch behind the same server (against the tutorial: the engine alone; the default server is
engine + ONNX Runtime), and ResNet-18 served vs in-process ONNX Runtime at batch 32, measured
just before and just after the served figure in the same round (drift printed; the run exits 1
when serving beats in-process by more than that noise: ``serve_report.resnet18_check``).
Then an overload phase at 10x the queue depth. Models have random weights (throughput does not
depend on them); every 200 is checked against in-process ``Predictor`` output on the same
image, labels and probabilities. Last line: one JSON object (medians over rounds).

    python benchmarks/serve_load.py                  # 3 rounds, 5 s per measurement, 20 s overload
    python benchmarks/serve_load.py --quick          # smoke: 1 round, 0.5 s, 1 s overload,
                                                     # 16x16 images, each server kind and code
                                                     # path once
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch
from http_client import Connection
from serve_report import summary
from serve_setup import (
    QUIET,
    SERVE_BASE,
    Server,
    correct_answer,
    inprocess_img_s,
    make_model,
    png_images,
)


async def load(
    url: str,
    bodies: list[bytes],
    expected: torch.Tensor | None,
    classes: list[str],
    concurrency: int,
    seconds: float,
    warmup: float = 0.3,
    content_type: str = "image/png",
) -> dict:
    """``concurrency`` clients posting images in a loop for ``seconds``; stats of the run."""
    latencies, codes, wrong = [], {}, 0
    deadline = time.perf_counter() + warmup + seconds
    measure_from = time.perf_counter() + warmup
    host, port = url.removeprefix("http://").split(":")

    async def client_loop(k: int) -> None:
        nonlocal wrong
        conn, i = Connection(host, int(port)), k
        try:
            while (now := time.perf_counter()) < deadline:
                idx = i % len(bodies)
                i += concurrency
                try:
                    r = await conn.post("/predict", bodies[idx], content_type)
                except (ConnectionError, asyncio.IncompleteReadError):
                    codes["transport_error"] = codes.get("transport_error", 0) + 1
                    continue
                if now < measure_from:
                    continue
                latencies.append(time.perf_counter() - now)
                codes[r.status_code] = codes.get(r.status_code, 0) + 1
                body = json.loads(r.content) if r.status_code == 200 else None
                if body is not None and expected is not None:
                    wrong += not correct_answer(body, expected[idx], classes)
        finally:
            await conn.close()

    cpu_before, wall_before = time.process_time(), time.perf_counter()
    await asyncio.gather(*(client_loop(k) for k in range(concurrency)))
    client_cpu = (time.process_time() - cpu_before) / (time.perf_counter() - wall_before)
    ok = sorted(latencies)
    return {
        "rps": codes.get(200, 0) / seconds,
        "client_cpu_cores": client_cpu,
        "codes": codes,
        "wrong": wrong,
        "p50_ms": 1e3 * _quantile(ok, 0.5),
        "p99_ms": 1e3 * _quantile(ok, 0.99),
    }


def _quantile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def measure(
    server: Server, bodies, expected, classes, concurrency: int, seconds: float, warmup: float
) -> dict:
    before = server.batch_stats()
    if server.litserve_echo:  # JSON in, JSON out, nothing decoded: LitServe's own path
        bodies, expected, kind = [b'{"n": 1}'], None, "application/json"
    else:
        kind = "image/png"
    out = asyncio.run(
        load(server.url, bodies, expected, classes, concurrency, seconds, warmup, kind)
    )
    after = server.batch_stats()
    calls = after[1] - before[1]
    if not server.is_bare and out["codes"].get(200) and not calls:
        raise RuntimeError(f"{server.url}/metrics counted no model call for {out['codes']}")
    out["mean_batch"] = (after[0] - before[0]) / calls if calls else 1.0
    return out


# (measurement name, server, concurrency); run in this order in every round (interleaved).
PLAN = [
    ("echo_c64", "echo", 64),
    ("litserve_echo_c64", "litserve_echo", 64),
    ("tutorial_c64", "tutorial", 64),
    ("batch1_c64", "batch1", 64),
    ("dynamic_c64", "dynamic", 64),
    ("spin_c64", "spin", 64),
    ("threads1_c64", "threads1", 64),
    ("workers2_c64", "workers2", 64),
    ("eager_c64", "eager", 64),
    ("dynamic_c16", "dynamic", 16),
    ("spin_c16", "spin", 16),
    ("batch1_c16", "batch1", 16),
    ("dynamic_c1", "dynamic", 1),
    ("tutorial_c16", "tutorial", 16),
    ("resnet18_c32", "resnet18", 32),
    ("resnet18_spin_c32", "resnet18_spin", 32),
]
# --quick is a smoke test: it skips the servers that differ from another one by a setting only
# (threads1 and resnet18_spin, next to workers2's serve.threads=1 and spin's ort_spinning) and
# the repeat measurements at other concurrencies; every server kind and code path still runs.
QUICK_SKIP = {"threads1", "resnet18_spin", "spin_c16", "batch1_c16", "dynamic_c1", "tutorial_c16"}


def run_rounds(
    servers: dict, data: dict, rounds: int, seconds: float, plan: list, warmup: float = 0.3
) -> list[dict]:
    from lightning_cls.inference import load_artifact

    threads = max(1, (os.cpu_count() or 1))
    resnet_inproc = load_artifact(data["resnet18"]["onnx"], threads=threads)
    resnet_images = data["resnet18"]["images"]
    results = []
    for r in range(rounds):
        row = {}
        for name, server, conc in plan:
            if server not in servers:  # litserve_echo without litserve installed
                continue
            if name == "resnet18_c32":  # in-process just before and just after (all suspended)
                for each in servers.values():
                    each.suspend()
                row["resnet18_inprocess_before"] = inprocess_img_s(
                    resnet_inproc, resnet_images, 32, seconds
                )
            for other in servers:  # only the measured server runs (see Server.suspend)
                if other != server:
                    servers[other].suspend()
            servers[server].resume()
            model = "resnet18" if server.startswith("resnet18") else "simplecnn"
            kind = "eager" if server in ("eager", "tutorial", "echo") else "onnx"
            expected = None if server == "echo" else data[model]["expected"][kind]
            bodies, classes = data[model]["bodies"], data[model]["classes"]
            row[name] = measure(servers[server], bodies, expected, classes, conc, seconds, warmup)
            print(f"round {r} {name}: {_fmt(row[name])}", file=sys.stderr)
            if name == "resnet18_c32":
                servers[server].suspend()
                row["resnet18_inprocess_after"] = inprocess_img_s(
                    resnet_inproc, resnet_images, 32, seconds
                )
                print(f"round {r} resnet18 in-process: {_bracket(row)}", file=sys.stderr)
        results.append(row)
    return results


def _bracket(row: dict) -> str:
    before, after = row["resnet18_inprocess_before"], row["resnet18_inprocess_after"]
    return f"{before:.0f} img/s before, {after:.0f} after ({after / before - 1:+.1%} drift)"


def overload(data: dict, work: Path, queue: int, seconds: float, warm_s: float = 1.0) -> dict:
    """10x ``queue`` clients for ``seconds`` (after ``queue`` clients for ``warm_s``): 5xx other
    than 503/504, RSS growth, correctness."""
    server = Server(
        data["simplecnn"]["onnx"], work / "overload", *QUIET, f"serve.max_queue={queue}"
    )
    try:
        server.wait_ready()
        warm = asyncio.run(
            load(
                server.url,
                data["simplecnn"]["bodies"],
                data["simplecnn"]["expected"]["onnx"],
                data["simplecnn"]["classes"],
                queue,
                warm_s,
            )
        )
        rss_before = server.rss_mb()
        out = asyncio.run(
            load(
                server.url,
                data["simplecnn"]["bodies"],
                data["simplecnn"]["expected"]["onnx"],
                data["simplecnn"]["classes"],
                10 * queue,
                seconds,
            )
        )
        rss_after = server.rss_mb()
        healthy = httpx.get(server.url + "/health", timeout=10).status_code == 200
    finally:
        server.stop()
    bad = sum(
        n
        for code, n in out["codes"].items()
        if isinstance(code, int) and code >= 500 and code not in (503, 504)
    )
    return {
        "codes": out["codes"],
        "bad_5xx": bad,
        "wrong": out["wrong"] + warm["wrong"],
        "rss_growth_mb": rss_after - rss_before,
        "rss_mb": rss_after,
        "healthy_after": healthy,
        "clients": 10 * queue,
        "seconds": seconds,
    }


def _fmt(m: dict) -> str:
    return (
        f"{m['rps']:.0f} req/s, p50 {m['p50_ms']:.1f} ms, p99 {m['p99_ms']:.1f} ms, "
        f"batch {m['mean_batch']:.1f}, client CPU {m['client_cpu_cores']:.2f} cores, "
        f"codes {m['codes']}, wrong {m['wrong']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (1 round, 0.5 s each)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--overload-seconds", type=float, default=20.0)
    parser.add_argument("--queue", type=int, default=32, help="max_queue in the overload phase")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.overload_seconds, args.queue = 1, 0.5, 1.0, 16
    # --quick: 0.2-s warm-ups, 0.5 s of load before the overload and 16 x 16 images (a smoke
    # run; the full mode: 0.3 s, 1 s and 32 x 32).
    warmup, warm_s, image_size = (0.2, 0.5, 16) if args.quick else (0.3, 1.0, 32)
    # Models, exports and server logs (~100 MB): removed at the end, also after a failure.
    with tempfile.TemporaryDirectory(prefix="serve_load_") as tmp:
        work = Path(tmp)
        data = {
            name: make_model(name, work / name, image_size) for name in ("simplecnn", "resnet18")
        }
        for name in data:
            data[name]["bodies"] = png_images(data[name]["images"])
        skip = QUICK_SKIP if args.quick else set()
        servers = start_servers(data, work, skip, suspend=args.quick)
        try:
            plan = [(n, server, c) for n, server, c in PLAN if not {n, server} & skip]
            results = run_rounds(servers, data, args.rounds, args.seconds, plan, warmup)
        finally:
            for server in servers.values():
                server.resume()
                server.stop()
        over = overload(data, work, args.queue, args.overload_seconds, warm_s)
    out = summary(results, over, args, PLAN)
    print(json.dumps(out))
    check = out["resnet18_check"]
    if not check["ok"]:
        message = (
            "ResNet-18 served faster than in-process by more than the noise "
            f"(served/in-process per round {check['served_over_inprocess']['per_round']}, "
            f"noise {check['noise_per_round']}): the measurement is broken, not the server"
        )
        if not args.quick:
            sys.exit("error: " + message)
        # --quick's 1-s single-round figures are a smoke test of the script, not a measurement.
        print("warning (not enforced with --quick): " + message, file=sys.stderr)


def start_servers(data: dict, work: Path, skip: set[str], suspend: bool = False) -> dict:
    """Start every server (all at once, so they load in parallel) but those named in ``skip``;
    with ``suspend`` (--quick), each is suspended once ready (``run_rounds`` resumes the one it
    measures), so that a ready LitServe's polling takes no CPU from those still loading."""
    simple, resnet = data["simplecnn"], data["resnet18"]
    onnx = simple["onnx"]
    starts = {
        "tutorial": lambda: Server.tutorial(simple["weights"], work / "tutorial"),
        "echo": lambda: Server.tutorial(simple["weights"], work / "echo", echo=True),
        "dynamic": lambda: Server(onnx, work / "dynamic", *SERVE_BASE),
        "batch1": lambda: Server(onnx, work / "batch1", "serve.max_batch_size=1", *SERVE_BASE),
        "spin": lambda: Server(onnx, work / "spin", "serve.ort_spinning=true", *SERVE_BASE),
        "threads1": lambda: Server(onnx, work / "threads1", "serve.threads=1", *SERVE_BASE),
        "workers2": lambda: Server(
            onnx, work / "workers2", "serve.workers=2", "serve.threads=1", *SERVE_BASE
        ),
        "eager": lambda: Server(simple["weights"], work / "eager", *SERVE_BASE),
        "resnet18": lambda: Server(resnet["onnx"], work / "resnet18", *SERVE_BASE),
        "resnet18_spin": lambda: Server(
            resnet["onnx"], work / "resnet18_spin", "serve.ort_spinning=true", *SERVE_BASE
        ),
    }
    if importlib.util.find_spec("litserve") is not None:
        starts["litserve_echo"] = lambda: Server.litserve_echo(work / "litserve_echo")
    servers = {name: start() for name, start in starts.items() if name not in skip}
    for server in servers.values():
        server.wait_ready()
        if suspend:
            server.suspend()
    return servers


if __name__ == "__main__":
    main()
