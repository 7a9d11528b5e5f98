"""ONNX Runtime session options on the CPU, paired against the settings lightning_cls ships.

    python benchmarks/ort_options.py                 # SimpleCNN and ResNet-18, 5 rounds
    python benchmarks/ort_options.py --quick         # smoke run: 5-ms windows, 2 rounds

Each variant is one ``InferenceSession`` over the same ONNX file (random weights: the speed
of these fp32 kernels does not depend on the values), differing from ``shipped``
(``lightning_cls.inference.runtimes.make_session``: ``ORT_ENABLE_ALL``, one intra-op pool of
``--threads`` threads, sequential) in one option only:

    basic      graph optimization level ORT_ENABLE_BASIC (constant folding, no fusions)
    extended   ORT_ENABLE_EXTENDED (fusions, but not the NCHWc layout transform of ENABLE_ALL)
    no_spin    session.intra_op.allow_spinning=0 (pool threads sleep instead of spinning)
    affinity   session.intra_op_thread_affinities: each pool thread pinned to its own core
    daz        session.set_denormal_as_zero=1 (denormals flushed to zero)

Rounds interleave every variant (order rotated per round); each times a window of >=
``--window`` s at batch 64 (img/s) and at batch 1 (p50 latency). Ratios to ``shipped`` are
computed inside each round, then median [min, max] over rounds. With ``--docs`` the table is
written into ``docs/export.md``. The last output line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from paired import cpu_name, export_untrained_onnx, summarize, write_section  # sibling

from lightning_cls.inference.runtimes import make_session

REPO = Path(__file__).resolve().parents[1]
DOC_START, DOC_END = "<!-- ort_options:start -->", "<!-- ort_options:end -->"
VARIANTS = ("shipped", "basic", "extended", "no_spin", "affinity", "daz")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["simplecnn", "resnet18"])
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--window", type=float, default=1.0, help="seconds timed per measurement")
    p.add_argument("--docs", action="store_true", help="write the table into docs/export.md")
    p.add_argument("--quick", action="store_true", help="short windows, 2 rounds (smoke test)")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.window = 2, 0.005
    if args.rounds < 1 or args.window <= 0 or args.threads < 1:
        p.error("--rounds and --threads must be >= 1 and --window > 0")
    return args


def session(path: Path, variant: str, threads: int):
    """``make_session`` as shipped, then the one option that ``variant`` changes."""
    import onnxruntime as ort

    if variant == "shipped":
        return make_session(path, threads)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if variant == "basic":
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    elif variant == "extended":
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    elif variant == "no_spin":
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    elif variant == "affinity":
        # One entry per pool thread beyond the caller's: logical processors 2..threads (1-based).
        cores = ";".join(str(c) for c in range(2, threads + 1))
        if cores:
            options.add_session_config_entry("session.intra_op_thread_affinities", cores)
    elif variant == "daz":
        options.add_session_config_entry("session.set_denormal_as_zero", "1")
    else:
        raise ValueError(f"Unknown variant '{variant}'; use one of {', '.join(VARIANTS)}.")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def time_window(sess, x: np.ndarray, window: float) -> list[float]:
    """Per-call seconds over a window of at least ``window`` seconds (one warm-up call)."""
    feed = {sess.get_inputs()[0].name: x}
    sess.run(None, feed)
    calls, start = [], time.perf_counter()
    while time.perf_counter() - start < window:
        t0 = time.perf_counter()
        sess.run(None, feed)
        calls.append(time.perf_counter() - t0)
    return calls


def main(argv=None) -> dict:
    args = parse_args(argv)
    rng = np.random.default_rng(0)
    results: dict = {"cpu": cpu_name(), "threads": args.threads, "rounds": args.rounds}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            _, _, path = export_untrained_onnx(name, Path(tmp) / f"{name}.onnx")
            sessions = {v: session(path, v, args.threads) for v in VARIANTS}
            x64 = rng.standard_normal((64, 3, 32, 32), dtype=np.float32)
            x1 = x64[:1].copy()
            rounds = []
            for r in range(args.rounds):
                order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
                row = {}
                for v in order:
                    calls = time_window(sessions[v], x64, args.window)
                    row[f"{v}_img_s"] = 64 * len(calls) / sum(calls)
                    row[f"{v}_p50_ms"] = (
                        statistics.median(time_window(sessions[v], x1, args.window)) * 1e3
                    )
                rounds.append(row)
                print(f"{name} round {r}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()))
            results[name] = {
                "rounds": rounds,
                **{
                    f"{v}_throughput_vs_shipped": summarize(
                        [row[f"{v}_img_s"] / row["shipped_img_s"] for row in rounds]
                    )
                    for v in VARIANTS[1:]
                },
                **{
                    f"{v}_latency_vs_shipped": summarize(  # < 1: faster than shipped
                        [row[f"{v}_p50_ms"] / row["shipped_p50_ms"] for row in rounds]
                    )
                    for v in VARIANTS[1:]
                },
            }
    table = markdown(results, args)
    print(table)
    if args.docs:
        write_section(REPO / "docs/export.md", DOC_START, DOC_END, table)
    print(json.dumps(results))
    return results


def markdown(results: dict, args) -> str:
    command = " ".join(["python benchmarks/ort_options.py", *sys.argv[1:]])
    lines = [
        DOC_START,
        "",
        f"`{command}` — {results['cpu']}, {args.threads} intra-op threads, "
        f"{args.rounds} interleaved rounds, windows of {args.window} s; ratio to `shipped` "
        "computed per round, median [min, max]:",
        "",
        "| model | variant | img/s @ 64, median | throughput / shipped | p50 ms @ 1 | "
        "latency / shipped |",
        "|---|---|---:|---|---:|---|",
    ]
    for name in args.models:
        res = results[name]
        for v in VARIANTS:
            img_s = statistics.median(r[f"{v}_img_s"] for r in res["rounds"])
            p50 = statistics.median(r[f"{v}_p50_ms"] for r in res["rounds"])
            if v == "shipped":
                ratios = ("1", "1")
            else:
                ratios = tuple(
                    "{median:.2f} [{min:.2f}, {max:.2f}]".format(**res[f"{v}_{k}_vs_shipped"])
                    for k in ("throughput", "latency")
                )
            lines.append(f"| {name} | {v} | {img_s:,.0f} | {ratios[0]} | {p50:.3f} | {ratios[1]} |")
    lines.append("")
    lines.append(DOC_END)
    return "\n".join(lines)


if __name__ == "__main__":
    main()
