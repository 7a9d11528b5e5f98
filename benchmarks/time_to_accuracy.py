"""Time to accuracy: train recipes one after the other in this run (or read finished runs) and
compare when each first reaches a validation-accuracy target, in wall and in CPU seconds.

Each run directory's ``csv/metrics.csv`` holds ``val/acc`` with ``time/elapsed_s`` and
``time/cpu_s`` (the WallClock callback) per validation, and ``results.json`` the held-out test
accuracy. The ratio that a machine's speed cancels out of: a recipe's time to ``--target``
divided by the ``--baseline`` recipe's whole training time, both measured in the same run of
this script. Draws one PNG, prints a markdown table; the last line is one JSON object.

    python benchmarks/time_to_accuracy.py --baseline tutorial \\
        --train "cifar10_fast=experiment=cifar10_fast data=imagefolder data.root=$CIFAR10 ..." \\
        --train "tutorial=experiment=cifar10_simplecnn trainer.max_epochs=15 data=imagefolder ..."
    python benchmarks/time_to_accuracy.py --run cifar10_fast=$WORK/a --run tutorial=$WORK/b
    python benchmarks/time_to_accuracy.py --quick   # two 2-epoch runs on tiny synthetic data
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

# --quick: 2 epochs of 2 steps on 16 x 16 synthetic images, no prediction mosaic (a smoke run
# of this script, not of training: the mosaic's figure cost more CPU than the training).
QUICK_COMMON = (
    "data=synthetic data.train_size=96 data.test_size=32 data.val_size=32 data.image_size=16 "
    "data.batch_size=32 prediction_mosaic=false trainer.max_epochs=2"
)
QUICK_RUNS = {
    "fast": f"experiment=cifar10_fast {QUICK_COMMON} ~data.mean ~data.std model.widths=[8,16,16]",
    "tutorial": f"experiment=cifar10_simplecnn {QUICK_COMMON}",
}
QUIET = ["~callbacks.progress_bar", "~callbacks.model_summary", "~callbacks.plots"]


def read_curve(run_dir: Path) -> list[dict[str, float]]:
    """One ``{"epoch", "wall_s", "cpu_s", "acc"}`` per validation, in time order, from the CSV
    log; ``epoch`` counts the epochs trained (1 after the first), whichever epochs validated."""
    rows = csv.DictReader((run_dir / "csv" / "metrics.csv").open())
    points = [
        {
            "epoch": int(r["epoch"]) + 1,
            "wall_s": float(r["time/elapsed_s"]),
            "cpu_s": float(r["time/cpu_s"]) if r.get("time/cpu_s") else float("nan"),
            "acc": float(r["val/acc"]),
        }
        for r in rows
        if r.get("time/elapsed_s") and r.get("val/acc")
    ]
    if not points:
        raise ValueError(f"{run_dir}/csv/metrics.csv has no val/acc with time/elapsed_s rows.")
    return sorted(points, key=lambda p: p["wall_s"])


# Lightning logs accuracies as float32: 4,500/5,000 is logged as 0.8999999761581421.
FLOAT32_SLACK = 1e-6


def time_to(curve: list[dict[str, float]], target: float) -> dict[str, float] | None:
    """The first validation point at or above ``target`` accuracy (None if never reached)."""
    for point in curve:
        if point["acc"] >= target - FLOAT32_SLACK:
            return {"epoch": point["epoch"], "wall_s": point["wall_s"], "cpu_s": point["cpu_s"]}
    return None


def summarize_run(run_dir: Path, target: float) -> dict:
    curve = read_curve(run_dir)
    results_file = run_dir / "results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else {}
    test_acc = (results.get("test") or {}).get("test/acc")
    return {
        "run_dir": str(run_dir),
        "epochs": curve[-1]["epoch"],
        "train_wall_s": round(curve[-1]["wall_s"], 1),
        "train_cpu_s": round(curve[-1]["cpu_s"], 1),
        "run_wall_s": results.get("wall_time_s"),
        "best_val_acc": round(max(p["acc"] for p in curve), 4),
        "final_val_acc": round(curve[-1]["acc"], 4),
        "test_acc": round(test_acc, 4) if test_acc is not None else None,
        "time_to_target": time_to(curve, target),
        "curve": curve,
    }


def ratios(figures: dict[str, dict], baseline: str) -> dict[str, dict]:
    """Each run's time to target over the baseline's whole training time (wall and CPU)."""
    if baseline not in figures:
        raise ValueError(f"--baseline {baseline!r} is not one of the runs: {', '.join(figures)}.")
    base = figures[baseline]
    out = {}
    for name, f in figures.items():
        reached = f["time_to_target"]
        if name == baseline or reached is None:
            continue
        out[name] = {
            "wall": round(reached["wall_s"] / base["train_wall_s"], 3),
            "cpu": round(reached["cpu_s"] / base["train_cpu_s"], 3),
        }
    return out


def train_runs(specs: dict[str, str], root: Path) -> dict[str, Path]:
    """Train each ``name -> overrides`` with ``python -m lightning_cls.train``, in order. The
    interpreter is this one, or ``$BENCH_PYTHON`` (the test suite's pre-imported ``python``
    shim for --quick: the curves are timed by the run itself, from its first step, so the
    process start-up it skips is not part of any figure)."""
    python = shlex.split(os.environ.get("BENCH_PYTHON", "")) or [sys.executable]
    dirs = {}
    for name, overrides in specs.items():
        run_dir = root / name
        cmd = [
            *python,
            "-m",
            "lightning_cls.train",
            *shlex.split(overrides),
            *QUIET,
            f"hydra.run.dir={run_dir}",
        ]
        print("+", shlex.join(cmd), file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        dirs[name] = run_dir
    return dirs


def plot(figures: dict[str, dict], target: float, out: Path) -> None:
    fig = plt.figure(figsize=(7, 4.5))
    for name, f in figures.items():
        curve = f["curve"]
        label = f"{name} (test {f['test_acc'] * 100:.2f}%)" if f["test_acc"] else name
        plt.plot(
            [p["wall_s"] / 60 for p in curve],
            [p["acc"] * 100 for p in curve],
            marker="o",
            ms=3,
            label=label,
        )
    plt.axhline(target * 100, color="grey", lw=0.8, ls="--")
    plt.xlabel("wall time (minutes)")
    plt.ylabel("validation accuracy (%)")
    plt.title("CIFAR-10: accuracy against wall time")
    plt.grid(alpha=0.3)
    plt.legend()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")


def parse_pairs(values: list[str], flag: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        if "=" not in value:
            raise ValueError(f"{flag} takes NAME=VALUE, got {value!r}.")
        name, rest = value.split("=", 1)
        pairs[name] = rest
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", action="append", default=[], help="NAME=RUN_DIR (finished)")
    parser.add_argument("--train", action="append", default=[], help="NAME=OVERRIDES (train now)")
    parser.add_argument("--target", type=float, default=0.90, help="validation accuracy target")
    parser.add_argument("--baseline", default=None, help="the run whose train time is the unit")
    parser.add_argument("--root", default=None, help="where --train writes its run directories")
    parser.add_argument("--out", default=None, help="PNG of accuracy against wall time")
    parser.add_argument("--quick", action="store_true", help="two 2-epoch synthetic runs")
    args = parser.parse_args()

    specs = parse_pairs(args.train, "--train")
    if args.quick:
        specs, args.baseline, args.target = dict(QUICK_RUNS), "tutorial", 0.2
    if not specs and not args.run:
        parser.error("give --run NAME=DIR, --train NAME=OVERRIDES or --quick.")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.root) if args.root else Path(tmp)
        dirs = {k: Path(v) for k, v in parse_pairs(args.run, "--run").items()}
        dirs |= train_runs(specs, root)
        figures = {name: summarize_run(d, args.target) for name, d in dirs.items()}
    if args.out:
        plot(figures, args.target, Path(args.out))
    print(
        "| run | epochs | train wall (s) | train CPU (s) | to target wall (s) | best val | test |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, f in figures.items():
        reached = f["time_to_target"]
        to_target = f"{reached['wall_s']:.0f} (epoch {reached['epoch']})" if reached else "never"
        print(
            f"| {name} | {f['epochs']} | {f['train_wall_s']} | {f['train_cpu_s']} | "
            f"{to_target} | {f['best_val_acc']:.4f} | {f['test_acc']} |"
        )
    summary = {
        "quick": args.quick,
        "target": args.target,
        "baseline": args.baseline,
        "runs": figures,
    }
    if args.baseline:
        summary["time_to_target_over_baseline"] = ratios(figures, args.baseline)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
