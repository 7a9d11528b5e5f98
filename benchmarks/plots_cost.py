"""What a training run's figures cost on this CPU: each plot function of
``lightning_cls.figures.plots`` drawn and written as PNG on fixed inputs (10-epoch curves, a
confusion matrix and per-class accuracy bars for 10 and for 100 classes, average precision bars
for 10 labels), and the prediction mosaic (``figures.mosaic.draw_mosaic``: 48 tiles of 32 px,
10 classes, side panels). Every training run with the default callbacks pays curves + confusion
+ bars, and with ``prediction_mosaic=true`` (the default) two mosaics (val and test).

Each figure's seconds are the median (and range) over ``--repeats`` calls after one untimed
warm-up call; the figures are drawn in turn within each repeat, so a shared machine's load
weighs on all alike.

    python benchmarks/plots_cost.py                  # 15 repeats
    python benchmarks/plots_cost.py --out $WORK/p    # also keep the PNGs, to look at
    python benchmarks/plots_cost.py --quick          # 1 repeat: the suite's smoke run

The last output line is the JSON of the run (CPU name, load average before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from paired import cpu_name

from lightning_cls.figures import mosaic, plots


def inputs() -> tuple[dict, list[dict], dict]:
    """Confusion matrices of 10 and 100 classes (mostly right, some of every confusion), a
    10-epoch history and 10 labels' scores (one undefined)."""
    g = torch.Generator().manual_seed(0)
    matrices = {}
    for k in (10, 100):
        matrix = torch.randint(0, 5, (k, k), generator=g)  # (K, K)
        matrices[k] = matrix + torch.diag(torch.randint(20, 60, (k,), generator=g))
    history = [
        {"epoch": e, "train/loss_epoch": 2 / (e + 1), "val/loss": 2.2 / (e + 1)}
        | {"train/acc": 1 - 1 / (e + 2), "val/acc": 1 - 1.1 / (e + 2)}
        for e in range(10)
    ]
    per_label = {
        f"label_{i}": {"average_precision": None if i == 3 else 0.3 + 0.06 * i, "positives": 5 + i}
        for i in range(10)
    }
    return matrices, history, per_label


def figures() -> dict[str, tuple]:
    """Name -> (plot function, its arguments before the path)."""
    matrices, history, per_label = inputs()
    calls = {"curves_10_epochs": (plots.plot_curves, history)}
    for k, matrix in matrices.items():
        classes = [f"class_{i}" for i in range(k)]
        calls[f"confusion_{k}_classes"] = (plots.plot_confusion, matrix, classes)
        calls[f"per_class_accuracy_{k}_classes"] = (plots.plot_per_class_accuracy, matrix, classes)
    calls["per_label_10_labels"] = (plots.plot_per_label, per_label)
    g = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (200, 3, 32, 32), dtype=torch.uint8, generator=g)
    true = torch.randint(0, 10, (200,), generator=g)
    wrong = torch.rand(200, generator=g) < 0.3
    pred = torch.where(wrong, torch.randint(0, 10, (200,), generator=g), true)
    calls["prediction_mosaic_48_tiles"] = (
        _mosaic,
        images,
        pred,
        true,
        [f"c{i}" for i in range(10)],
    )
    return calls


def _mosaic(images, pred, true, classes, path):
    mosaic.draw_mosaic(images, pred, classes, path, true=true)


def measure(folder: Path, repeats: int) -> dict:
    calls = figures()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for name, (plot, *args) in calls.items():  # warm-up: imports, fonts, colour maps
        plot(*args, folder / f"{name}.png")
    for _ in range(repeats):
        for name, (plot, *args) in calls.items():
            start = time.perf_counter()
            plot(*args, folder / f"{name}.png")
            times[name].append(time.perf_counter() - start)
    return {
        name: {
            "median_s": round(statistics.median(t), 4),
            "min_s": round(min(t), 4),
            "max_s": round(max(t), 4),
            "png_bytes": (folder / f"{name}.png").stat().st_size,
        }
        for name, t in times.items()
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", type=Path, default=None, help="keep the PNGs in this folder")
    parser.add_argument("--quick", action="store_true", help="1 repeat")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 1
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.out or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        rows = measure(folder, args.repeats)
    for name, row in rows.items():
        print(
            f"{name:<32} {row['median_s']:.3f} s (range {row['min_s']:.3f}-{row['max_s']:.3f}), "
            f"{row['png_bytes'] / 1000:.0f} kB"
        )
    out = {
        "quick": args.quick,
        "cpu": cpu_name(),
        "repeats": args.repeats,
        "load_before": [round(v, 2) for v in load_before],
        "load_after": [round(v, 2) for v in os.getloadavg()],
        "figures": rows,
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
