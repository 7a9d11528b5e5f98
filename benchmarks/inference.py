"""CPU inference benchmark: every PyTorch runtime (eager, channels_last, torch.compile,
TorchScript) against every exported one (ONNX Runtime fp32 / static INT8 in QDQ and QOperator
format, OpenVINO f32 / bf16 / NNCF INT8), for SimpleCNN and ResNet-18 (CIFAR stem).

    python benchmarks/inference.py --ckpt-simplecnn a.ckpt --ckpt-resnet18 b.ckpt
    python benchmarks/inference.py                      # trains both briefly first
    python benchmarks/inference.py --quick              # smoke run: tiny data, short windows

Data: ../shared/data/cifar10-train-jpg.tar.gz (45,000 train / 5,000 val, seeded split); if the
archive is missing, a synthetic task is used and the output says so. Each round times every
runtime (order rotated per round) for a window of >= --window seconds at batch 64 (img/s)
and another at batch 1 (p50 latency of that window's calls), all with one intra-op pool of
--threads threads. Speed-ups are paired: computed inside each round, then median [min, max]
over rounds. "Best" is the runtime with the best median: the best exported runtime is quoted
against the best PyTorch runtime, and each INT8 runtime against the fp32 of the same engine.
The last output line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from inference_setup import EXPORTED, PYTORCH, load_data, prepare_model, runtimes  # siblings
from paired import cpu_name, summarize, write_section

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt-simplecnn", type=Path, help="trained SimpleCNN .ckpt (else train one)")
    p.add_argument("--ckpt-resnet18", type=Path, help="trained ResNet-18 .ckpt (else train one)")
    p.add_argument("--models", nargs="+", default=["simplecnn", "resnet18"])
    p.add_argument("--runtimes", nargs="+", help="only these runtimes (default: all)")
    p.add_argument("--acc-images", type=int, help="val images for accuracy (default: all)")
    p.add_argument(
        "--data", type=Path, default=REPO.parent / "shared/data/cifar10-train-jpg.tar.gz"
    )
    p.add_argument(
        "--threads", type=int, default=os.cpu_count(), help="intra-op threads (all cores)"
    )
    p.add_argument("--epochs-simplecnn", type=int, default=10)
    p.add_argument("--epochs-resnet18", type=int, default=3)
    p.add_argument(
        "--train-fraction-simplecnn",
        type=float,
        default=1.0,
        help="fraction of the train split per epoch when training SimpleCNN here",
    )
    p.add_argument(
        "--train-fraction-resnet18",
        type=float,
        default=1.0,
        help="fraction of the train split per epoch when training ResNet-18 here",
    )
    p.add_argument(
        "--train-precision",
        default="32-true",
        help="Lightning precision for the short training runs (e.g. bf16-mixed)",
    )
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    p.add_argument(
        "--window", type=float, default=1.0, help="seconds timed per runtime, batch, round"
    )
    p.add_argument("--calibration-batches", type=int, default=16)
    p.add_argument("--out-dir", type=Path, default=REPO / "outputs/benchmark_inference")
    p.add_argument(
        "--docs", type=Path, help="rewrite this file's inference section (docs/benchmarks.md)"
    )
    p.add_argument("--quick", action="store_true", help="tiny data and few iterations (smoke test)")
    args = p.parse_args(argv)
    if args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    if args.rounds < 1 or args.window <= 0:
        p.error(f"--rounds must be >= 1 and --window > 0, got {args.rounds}, {args.window}")
    if args.quick:
        args.epochs_simplecnn, args.epochs_resnet18 = 1, 1
        args.rounds, args.window, args.calibration_batches = 2, 0.005, 2
        args.data = Path("/nonexistent")  # a small synthetic task: no decoding, fast training
    return args


log = logging.getLogger("benchmark")


def time_window(fn, x: torch.Tensor, seconds: float) -> list[float]:
    """Call ``fn(x)`` for at least ``seconds`` (and 3 calls); each call's wall time in ms."""
    fn(x), fn(x)  # warm caches and any lazy compilation of this shape
    times, start = [], time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        fn(x)
        times.append(1000.0 * (time.perf_counter() - t))
    return times


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def benchmark_model(name: str, data, args) -> dict:
    net, meta, ckpt = prepare_model(name, data, args)
    fns = runtimes(
        net, meta, data, args.out_dir / name, args.threads, args.calibration_batches, args.runtimes
    )
    val = data.splits["val"]
    if args.acc_images:
        val = val.subset(torch.arange(min(args.acc_images, len(val))))
    res: dict[str, dict] = {rt: {} for rt in fns}
    for rt, fn in fns.items():
        preds = torch.cat(
            [
                fn(meta.preprocess(val.images[i : i + 250])).argmax(1)
                for i in range(0, len(val), 250)
            ]
        )
        res[rt]["val_acc"] = round((preds == val.labels).float().mean().item(), 4)
    g = torch.Generator().manual_seed(0)
    x64 = meta.preprocess(
        torch.randint(0, 256, (64, *meta.input_shape), dtype=torch.uint8, generator=g)
    )
    x1 = x64[:1].clone()
    b64: list[dict[str, float]] = []  # per round: runtime -> img/s at batch 64
    b1: list[dict[str, float]] = []  # per round: runtime -> p50 ms at batch 1
    order = list(fns)
    for r in range(args.rounds):
        shift = r % len(order)  # rotate the order so that no runtime always runs first
        b64.append({}), b1.append({})
        for rt in order[shift:] + order[:shift]:
            times = time_window(fns[rt], x64, args.window)
            b64[-1][rt] = 64 * len(times) / (sum(times) / 1000)
            b1[-1][rt] = percentile(time_window(fns[rt], x1, args.window), 50)
        log.info("%s: round %d/%d done", name, r + 1, args.rounds)
    for rt in fns:
        res[rt]["img_s_b64"] = [round(r[rt], 1) for r in b64]
        res[rt]["p50_ms_b1"] = [round(r[rt], 4) for r in b1]
    log.info("%s checkpoint: %s", name, ckpt)
    return {"checkpoint": str(ckpt), "runtimes": res, **speedups(res, b64, b1)}


def _best(candidates, rounds: list[dict[str, float]], higher: bool) -> str | None:
    present = [c for c in candidates if c in rounds[0]]
    if not present:
        return None
    key = lambda rt: statistics.median(r[rt] for r in rounds)  # noqa: E731
    return max(present, key=key) if higher else min(present, key=key)


def speedups(res: dict, b64: list[dict], b1: list[dict]) -> dict:
    """Paired speed-ups: best exported vs best PyTorch, and every INT8 vs its own fp32."""
    out: dict = {}
    for batch, rounds, higher in (("b64", b64, True), ("b1", b1, False)):
        torch_best = _best(PYTORCH, rounds, higher)
        exported_best = _best(EXPORTED, rounds, higher)
        out[f"best_pytorch_{batch}"], out[f"best_exported_{batch}"] = torch_best, exported_best
        if torch_best and exported_best:
            num, den = (exported_best, torch_best) if higher else (torch_best, exported_best)
            out[f"exported_over_pytorch_{batch}"] = summarize([r[num] / r[den] for r in rounds])
        for int8, fp32 in EXPORTED.items():
            if fp32 and int8 in rounds[0] and fp32 in rounds[0]:
                num, den = (int8, fp32) if higher else (fp32, int8)
                out.setdefault("int8", {}).setdefault(int8, {"over": fp32})[batch] = summarize(
                    [r[num] / r[den] for r in rounds]
                )
    for int8, entry in out.get("int8", {}).items():
        entry["acc_drop_points"] = round(
            100 * (res[entry["over"]]["val_acc"] - res[int8]["val_acc"]), 2
        )
    return out


def _ratio(s: dict) -> str:
    return f"{s['median']:.2f}x [{s['min']:.2f}, {s['max']:.2f}]"


def markdown(all_results: dict) -> str:
    lines = [
        "| model | runtime | img/s @64 | p50 ms @1 | val acc |",
        "|---|---|---:|---:|---:|",
    ]
    for model, result in all_results.items():
        for rt, r in result["runtimes"].items():
            lines.append(
                f"| {model} | {rt} | {statistics.median(r['img_s_b64']):.0f} | "
                f"{statistics.median(r['p50_ms_b1']):.3f} | {100 * r['val_acc']:.2f}% |"
            )
    lines.append("")
    for model, result in all_results.items():
        for batch, target in (("b64", "img/s @64"), ("b1", "p50 @1")):
            if f"exported_over_pytorch_{batch}" in result:
                lines.append(
                    f"- {model}, {target}: best exported `{result[f'best_exported_{batch}']}` / "
                    f"best PyTorch `{result[f'best_pytorch_{batch}']}` = "
                    f"{_ratio(result[f'exported_over_pytorch_{batch}'])} (target >= 1.5x)"
                )
        for int8, e in result.get("int8", {}).items():
            lines.append(
                f"- {model}: `{int8}` / `{e['over']}` = {_ratio(e['b64'])} @64, "
                f"{_ratio(e['b1'])} @1 (target >= 2x); accuracy drop "
                f"{e['acc_drop_points']:.2f} points (target <= 1)"
            )
    return "\n".join(lines)


DOC_START, DOC_END = "<!-- inference:start -->", "<!-- inference:end -->"


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr
    )
    for chatty in ("onnxscript", "onnx_ir", "nncf"):  # exporters' per-pass INFO lines
        logging.getLogger(chatty).setLevel(logging.WARNING)
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    data = load_data(args)
    setup = {
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "threads": args.threads,
        "torch": torch.__version__,
        "data": data.source,
        "rounds": args.rounds,
        "window_s": args.window,
        "quick": args.quick,
    }
    results = {name: benchmark_model(name, data, args) for name in args.models}
    table = markdown(results)
    print(table, flush=True)
    if args.docs:
        command = " ".join(["python benchmarks/inference.py", *sys.argv[1:]])
        section = f"{DOC_START}\n```bash\n{command}\n```\n\nSetup: {json.dumps(setup)}\n\n{table}\n{DOC_END}"
        write_section(args.docs, DOC_START, DOC_END, section)
    print(json.dumps({"setup": setup, "models": results}), flush=True)


if __name__ == "__main__":
    main()
