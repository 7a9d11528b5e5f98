"""Accuracy against wall time for finished training runs (e.g. cifar10_fast vs the classic recipe).

Reads each run directory's ``csv/metrics.csv`` (``val/acc`` and ``time/elapsed_s``, logged by
the WallClock callback) and ``results.json`` (held-out test accuracy), draws one PNG and prints
a markdown table; the last line is one JSON object with every figure.

    python benchmarks/time_to_accuracy.py --run cifar10_fast=/tmp/bench/fast_run \\
        --run cifar10_simplecnn=/tmp/bench/classic_run --out docs/img/cifar10_time_to_accuracy.png
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_curve(run_dir: Path) -> list[tuple[float, float]]:
    """(elapsed seconds, val accuracy) per validation, from the run's CSV log."""
    rows = csv.DictReader((run_dir / "csv" / "metrics.csv").open())
    points = [
        (float(r["time/elapsed_s"]), float(r["val/acc"]))
        for r in rows
        if r.get("time/elapsed_s") and r.get("val/acc")
    ]
    if not points:
        raise ValueError(f"{run_dir}/csv/metrics.csv has no val/acc with time/elapsed_s rows.")
    return sorted(points)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="append", required=True, help="NAME=RUN_DIR")
    parser.add_argument("--out", default="docs/img/cifar10_time_to_accuracy.png")
    args = parser.parse_args()

    figures, fig = {}, plt.figure(figsize=(7, 4.5))
    for spec in args.run:
        name, run_dir = spec.split("=", 1)
        run_dir = Path(run_dir)
        curve = read_curve(run_dir)
        results = json.loads((run_dir / "results.json").read_text())
        test_acc = results["test"].get("test/acc")
        plt.plot([t / 60 for t, _ in curve], [a * 100 for _, a in curve], marker="o", ms=3,
                 label=f"{name} (test {test_acc * 100:.2f}%)")  # fmt: skip
        figures[name] = {
            "epochs": len(curve),
            "train_wall_s": round(curve[-1][0], 1),
            "run_wall_s": results.get("wall_time_s"),
            "final_val_acc": round(curve[-1][1], 4),
            "test_acc": round(test_acc, 4) if test_acc is not None else None,
        }
    plt.axhline(90, color="grey", lw=0.8, ls="--")
    plt.xlabel("wall time (minutes, 2 CPU cores)")
    plt.ylabel("validation accuracy (%)")
    plt.title("CIFAR-10: accuracy against wall time")
    plt.grid(alpha=0.3)
    plt.legend()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110, bbox_inches="tight")

    print("| run | epochs | train wall (s) | final val acc | held-out test acc |")
    print("|---|---|---|---|---|")
    for name, f in figures.items():
        print(f"| {name} | {f['epochs']} | {f['train_wall_s']} | {f['final_val_acc']:.4f} | {f['test_acc']} |")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
