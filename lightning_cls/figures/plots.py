"""The run's figures: ``curves.png`` (loss and accuracy per epoch), the confusion matrix, the
per-class accuracy bars and the per-label scores of a multi-label run. ``callbacks.plots``'s
``TrainingPlots`` decides when they are drawn; the training tasks' ``test_figures`` name which.

Every training run pays for these figures, so what grows with the classes (cells, counts,
bars, class names) is painted with PIL (``figures.painting``); matplotlib draws only the
frames, titles, axis names, x ticks and colour bar. The 10-class confusion matrix had 120
matplotlib texts (``benchmarks/plots_cost.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from lightning_cls.figures import painting
from lightning_cls.figures.painting import DPI, SAVE
from lightning_cls.fileio import atomic_savefig

# Panel -> metrics; a metric the run does not log (val/map of a multi-class run) is not drawn.
CURVES = {
    "loss": ("train/loss_epoch", "val/loss"),
    "accuracy": ("train/acc", "val/acc", "val/map", "val/f1_micro"),
}


def plot_curves(history: list[dict[str, float]], path: Path) -> None:
    """Loss and accuracy per epoch, train and val, side by side."""
    fig = painting.figure(1000, 400)
    axes = fig.subplots(1, 2)
    fig.subplots_adjust(left=0.07, right=0.985, bottom=0.12, top=0.92, wspace=0.2)
    epochs = [row["epoch"] for row in history]
    for ax, (title, keys) in zip(axes, CURVES.items()):
        for key in (k for k in keys if any(k in row for row in history)):
            values = [row.get(key, float("nan")) for row in history]
            ax.plot(epochs, values, marker="o", label=key.replace("_epoch", ""))
        multilabel = any("val/map" in row for row in history)
        ax.set(title="mAP and micro-F1" if multilabel and title == "accuracy" else title)
        ax.set(xlabel="epoch")
        ax.grid(alpha=0.3)
        ax.legend()
    atomic_savefig(fig, path, **SAVE)


def _cells(matrix: torch.Tensor, normalized: torch.Tensor, cell: int) -> np.ndarray:
    """(K * cell, K * cell, 3) uint8: ``imshow(normalized, cmap="Blues", vmin=0, vmax=1)`` at
    ``cell`` pixels a cell, each count written in its cell up to 20 classes."""
    from matplotlib import colormaps
    from PIL import Image, ImageDraw

    colors = (colormaps["Blues"](normalized.numpy())[..., :3] * 255).astype(np.uint8)  # (K, K, 3)
    cells = Image.fromarray(colors.repeat(cell, 0).repeat(cell, 1))
    if len(matrix) <= 20:
        draw, font = ImageDraw.Draw(cells), painting.font(8)
        for (i, j), n in np.ndenumerate(matrix.numpy()):
            white = normalized[i, j] > 0.5
            xy = ((j + 0.5) * cell, (i + 0.5) * cell)
            draw.text(xy, str(n), font=font, fill="white" if white else "black", anchor="mm")
    return np.asarray(cells)


def _column_names(classes: Sequence[str], font, cell: int) -> tuple[np.ndarray, bool]:
    """The strip of class names under the matrix, and whether it was left blank for
    matplotlib to write them slanted (long names, up to 10 classes: as drawn before)."""
    longest = max(font.getlength(c) for c in classes)
    if longest + 4 <= cell:  # short names fit level
        return painting.centred(classes, font, cell), False
    if len(classes) <= 10:
        height = int((longest + font.size) / 2**0.5) + 8  # a name turned 45 degrees
        return np.full((height, len(classes) * cell, 3), 255, np.uint8), True
    return np.rot90(painting.labels(classes, font, cell)), False  # reads upwards, like rotation=90


def plot_confusion(matrix: torch.Tensor, classes: list[str], path: Path) -> None:
    """Row-normalized confusion matrix (rows: true class, columns: predicted), each cell's
    count written in it up to 20 classes."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.transforms import IdentityTransform

    k = len(classes)
    normalized = matrix.float() / matrix.sum(1, keepdim=True).clamp(min=1)  # (K, K)
    cell = max(1, min(60, min(200 + 40 * k, 1800) // k), 240 // k)  # pixels: 60 for 4 to 10
    font = painting.font(min(10, max(5, (cell - 2) * 72 / DPI)))  # smaller if crowded
    rows = painting.labels(classes, font, cell)  # (K * cell, w, 3)
    columns, slanted = _column_names(classes, font, cell)
    side, pad = k * cell, rows.shape[1]
    canvas = np.full((side + columns.shape[0], pad + side, 3), 255, np.uint8)
    canvas[:side, :pad] = rows
    canvas[:side, pad:] = _cells(matrix, normalized, cell)
    canvas[side:, pad:] = columns
    left, bottom, top, right = 40, 40, 40, 110  # axis names; title; colour bar and its ticks
    fig = painting.figure(left + canvas.shape[1] + right, bottom + canvas.shape[0] + top)
    ax = painting.place(fig, canvas, left, bottom, side, side, lift=columns.shape[0])
    ax.set(xticks=[], title="confusion matrix (test)")
    ax.set_xlabel("predicted", labelpad=columns.shape[0] * 72 / DPI)
    ax.set_ylabel("true", labelpad=pad * 72 / DPI)
    for j, name in enumerate(classes if slanted else []):
        xy = (left + pad + (j + 0.5) * cell, bottom + columns.shape[0] - 4)
        fig.text(*xy, name, rotation=45, ha="right", va="top", transform=IdentityTransform())
    h, w = fig.bbox.height, fig.bbox.width
    cax = fig.add_axes(((w - right + 20) / w, (h - top - side) / h, 15 / w, side / h))
    fig.colorbar(ScalarMappable(Normalize(0, 1), "Blues"), cax=cax)
    atomic_savefig(fig, path, **SAVE)


def _bars(
    values: Sequence[float],
    support: Sequence[int],
    classes: Sequence[str],
    title: str,
    xlabel: str,
    path: Path,
) -> None:
    """One horizontal bar per class (``painting.bars``), in a figure of its own: what
    ``figures.mosaic`` draws beside its tiles."""
    width = 440  # pixels of the plot
    canvas = painting.bars(values, support, classes, painting.bar_pitch(len(classes)), width)
    left, bottom, top, right = 10, 45, 35, 25  # x ticks and name; title
    fig = painting.figure(left + canvas.shape[1] + right, bottom + canvas.shape[0] + top)
    painting.axes_over(fig, canvas, left, bottom, width, title, xlabel)
    atomic_savefig(fig, path, **SAVE)


def plot_per_class_accuracy(matrix: torch.Tensor, classes: list[str], path: Path) -> None:
    """Per-class test accuracy (recall) as horizontal bars, classes under 50% in red."""
    support = matrix.sum(1)
    total = matrix.diag().sum().item() / max(1, matrix.sum().item())
    accuracy = (matrix.diag().double() / support.clamp(min=1)).tolist()
    title = f"per-class accuracy (test, overall {total:.1%})"
    _bars(accuracy, support.tolist(), classes, title, "accuracy", path)


def plot_per_label(per_label: dict[str, dict], path: Path) -> None:
    """Multi-label test scores: average precision per label (and its positive count)."""
    names = list(per_label)
    ap = [per_label[n]["average_precision"] for n in names]
    ap = [float("nan") if v is None else v for v in ap]
    positives = [per_label[n]["positives"] for n in names]
    defined = [v for v in ap if v == v]
    mean = sum(defined) / len(defined) if defined else float("nan")
    title = f"average precision per label (test, mAP {mean:.3f})"
    _bars(ap, positives, names, title, "average precision", path)


def per_class_table(matrix: torch.Tensor, classes: list[str]) -> str:
    support = matrix.sum(1)
    accuracy = matrix.diag().float() / support.clamp(min=1)
    width = max(len(c) for c in classes + ["class"])
    lines = [f"{'class':<{width}}  accuracy  support"]
    for name, acc, n in zip(classes, accuracy.tolist(), support.tolist()):
        lines.append(f"{name:<{width}}  {acc:8.4f}  {int(n):7d}")
    return "\n".join(lines)
