"""Pictures of predictions: a mosaic of images with their predicted (and true) labels, the wrong
ones framed in red, beside per-class accuracy bars and the most-confused class pairs.

One drawing function (``draw_mosaic``) serves ``train`` and ``eval`` (validation/test images of
a DataModule, ``write_split_mosaic``) and ``predict`` (image files, true labels read from their
parent folder's name when it is a class name). Multi-label predictions ((N, K) multi-hot) show
every predicted label, are wrong when the predicted set differs from the true one, and the side
panels become per-label recall and the most missed / most falsely predicted labels. What is
predicted, and what a file's folder says, is the task's to say (``inference.tasks``). Drawing
needs matplotlib, not Lightning: ``predict`` draws without importing it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from lightning_cls.fileio import atomic_savefig
from lightning_cls.inference.tasks import Task, create_task

log = logging.getLogger(__name__)


def confusion(true: torch.Tensor, pred: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(K, K) int64 counts, rows true class, columns predicted."""
    index = true.long() * num_classes + pred.long()
    return torch.bincount(index, minlength=num_classes**2).view(num_classes, num_classes)


def most_confused(
    matrix: torch.Tensor, classes: Sequence[str], top: int = 5
) -> list[tuple[str, str, int]]:
    """The ``top`` (true, predicted, count) off-diagonal cells, largest first."""
    off = matrix.clone()
    off.fill_diagonal_(0)
    counts, cells = off.flatten().sort(descending=True)
    k = matrix.shape[0]
    return [
        (classes[c // k], classes[c % k], n)
        for n, c in zip(counts.tolist()[:top], cells.tolist()[:top])
        if n > 0
    ]


def draw_class_bars(ax, matrix: torch.Tensor, classes: Sequence[str], title: str) -> None:
    """Horizontal bars of per-class accuracy (recall), support in the labels."""
    support = matrix.sum(1)
    draw_bars(ax, (matrix.diag().double() / support.clamp(min=1)).tolist(), support, classes, title)


def draw_bars(
    ax,
    values: Sequence[float],
    support: torch.Tensor,
    classes: Sequence[str],
    title: str,
    xlabel: str = "accuracy",
) -> None:
    """One horizontal bar per class (a value in 0..1, NaN drawn as none), support in the
    labels, values under 0.5 in red."""
    values = [0.0 if v != v else v for v in values]
    labels = [f"{c} (n={int(n)})" for c, n in zip(classes, support.tolist())]
    colors = ["tab:red" if a < 0.5 else "tab:blue" for a in values]
    ax.barh(range(len(classes)), values, color=colors)
    if len(classes) <= 30:  # the value beside each bar (a 0% bar has no width to see)
        for i, (a, n) in enumerate(zip(values, support.tolist())):
            ax.text(min(a, 0.85) + 0.01, i, f"{a:.0%}" if n else "-", va="center", fontsize=7)
    ax.set_yticks(range(len(classes)), labels, fontsize=8 if len(classes) <= 20 else 5)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set(xlabel=xlabel, title=title)
    ax.grid(axis="x", alpha=0.3)


def _wrong(true: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
    """(N,) bool: the predicted class (multi-label: the predicted set) is not the true one."""
    mismatch = true.bool() != pred.bool() if pred.ndim == 2 else true != pred
    return mismatch.any(1) if pred.ndim == 2 else mismatch


def _names(row: torch.Tensor, classes: Sequence[str]) -> str:
    """A class index, or a multi-hot row's labels joined by commas ("-" for none)."""
    if row.ndim == 0:
        return classes[int(row)]
    return ", ".join(classes[i] for i in row.nonzero().flatten().tolist()) or "-"


def _tile_order(true: torch.Tensor | None, pred: torch.Tensor, tiles: int) -> list[int]:
    """Up to half the tiles for wrong predictions (they are what one looks for), then the rest
    in order."""
    if true is None:
        return list(range(min(tiles, len(pred))))
    wrong = _wrong(true, pred).nonzero().flatten().tolist()[: tiles // 2]
    right = [i for i in range(len(pred)) if i not in set(wrong)]
    return sorted(wrong + right[: tiles - len(wrong)])


# A tile's cell, in pixels at the saved 100 dpi: the image square under two or three label lines.
CELL_W, CELL_H, IMAGE_PX, DPI = 150, 170, 120, 100


def _tile_pixels(img: torch.Tensor, heat: torch.Tensor | None) -> np.ndarray:
    """(IMAGE_PX, IMAGE_PX, 3) uint8 of one (C, H, W) uint8 image, its heat map (H, W) in
    [0, 1] blended over it like ``imshow(cmap="jet", alpha=0.45)``."""
    from matplotlib import colormaps
    from PIL import Image

    rgb = img.expand(3, -1, -1) if img.shape[0] == 1 else img[:3]
    array = rgb.permute(1, 2, 0).numpy()  # (H, W, 3)
    if heat is not None:
        jet = colormaps["jet"](heat.clamp(0, 1).numpy())[..., :3] * 255  # (H, W, 3)
        array = (0.55 * array + 0.45 * jet).round().astype(np.uint8)
    small = max(array.shape[:2]) < IMAGE_PX  # pixel art stays sharp, photos are smoothed
    resample = Image.Resampling.NEAREST if small else Image.Resampling.BILINEAR
    return np.asarray(Image.fromarray(array).resize((IMAGE_PX, IMAGE_PX), resample))


def _tile_canvas(tiles: list[np.ndarray], wrong: list[bool], cols: int, rows: int) -> np.ndarray:
    """All tiles on one white (rows * CELL_H, cols * CELL_W, 3) canvas, each at the bottom of
    its cell inside a frame: 3 px red for a wrong prediction, 1 px grey otherwise."""
    canvas = np.full((rows * CELL_H, cols * CELL_W, 3), 255, np.uint8)
    for n, (tile, bad) in enumerate(zip(tiles, wrong)):
        top = (n // cols) * CELL_H + CELL_H - IMAGE_PX - 6
        left = (n % cols) * CELL_W + (CELL_W - IMAGE_PX) // 2
        frame = 3 if bad else 1
        canvas[top - frame : top + IMAGE_PX + frame, left - frame : left + IMAGE_PX + frame] = (
            (214, 39, 40) if bad else (204, 204, 204)
        )
        canvas[top : top + IMAGE_PX, left : left + IMAGE_PX] = tile
    return canvas


def draw_mosaic(
    images: torch.Tensor,  # (N, C, H, W) uint8
    pred: torch.Tensor,  # (N,) class indices, or (N, K) multi-hot (multi-label)
    classes: Sequence[str],
    path: Path,
    true: torch.Tensor | None = None,  # like pred, or None (unknown: no marks, no side panels)
    title: str = "predictions",
    tiles: int = 48,
    heatmaps=None,  # (N, H, W) in [0, 1], or a function of the tiles' images giving them
) -> Path:
    """Draw the mosaic to ``path``. ``heatmaps``: a heat map over each tile (``explain``'s
    maps, drawn half transparent), or a function of the shown images (n, C, H, W) that gives
    their maps, so only the tiles drawn are explained.

    The tiles are painted into one image placed pixel for pixel on the figure (one text per
    tile), not one axes per tile: 48 matplotlib axes took about a second to lay out and render,
    longer than a short training run itself."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import IdentityTransform

    order = _tile_order(true, pred, tiles)
    wrongs = _wrong(true, pred) if true is not None else None
    cols = min(8, max(1, len(order)))
    rows = max(1, -(-len(order) // cols))
    side = true is not None
    if callable(heatmaps):
        heatmaps = dict(zip(order, heatmaps(images[order])))
    wrong = [wrongs is not None and bool(wrongs[i]) for i in order]
    canvas = _tile_canvas(
        [_tile_pixels(images[i], None if heatmaps is None else heatmaps[i]) for i in order],
        wrong,
        cols,
        rows,
    )
    width_in, height_in = CELL_W * cols / DPI + (5 if side else 0), CELL_H * rows / DPI + 0.8
    fig = plt.figure(figsize=(width_in, height_in), dpi=DPI)
    fig.figimage(canvas, 0, 0, origin="upper")  # pixel for pixel: nothing to resample
    pixels = IdentityTransform()  # text placed in the saved image's pixels, y up
    for n, i in enumerate(order):
        label = _names(pred[i], classes)
        if true is not None:
            label = f"pred {label}\ntrue {_names(true[i], classes)}" + (" ✗" if wrong[n] else "")
        x, y = (n % cols + 0.5) * CELL_W, (rows - 1 - n // cols) * CELL_H + 6 + IMAGE_PX + 6
        color = "tab:red" if wrong[n] else "black"
        fig.text(x, y, label, fontsize=7, ha="center", va="bottom", color=color, transform=pixels)
    grid_w, grid_h = CELL_W * cols / DPI / width_in, CELL_H * rows / DPI / height_in
    if side:
        _side_panels(fig, true, pred, classes, left=grid_w + 1.6 / width_in, height=grid_h)
        correct = len(true) - int(wrongs.sum())
        title = f"{title}: {correct / max(1, len(true)):.1%} of {len(true)} correct"
    fig.suptitle(title, y=1 - 0.25 / height_in, va="center")
    atomic_savefig(fig, path, dpi=DPI)
    plt.close(fig)
    return path


def _side_panels(fig, true, pred, classes: Sequence[str], left: float, height: float) -> None:
    """Per-class accuracy (multi-label: per-label recall) bars over the most confused pairs
    (multi-label: the most wrong labels), right of the tiles."""
    width = 1 - left - 0.02
    bars = fig.add_axes((left, height * 0.55, width, height * 0.4))
    text = fig.add_axes((left, 0.02, width, height * 0.4))
    text.axis("off")
    if pred.ndim == 2:
        heading, lines = _multilabel_panels(bars, true.bool(), pred.bool(), classes)
    else:
        matrix = confusion(true, pred, len(classes))
        draw_class_bars(bars, matrix, classes, "per-class accuracy")
        pairs = most_confused(matrix, classes)
        heading = "most confused (true → pred)"
        lines = [f"{t} → {p}: {n}" for t, p, n in pairs] or ["no confusions"]
    text.text(0, 1, heading + "\n\n" + "\n".join(lines), va="top", fontsize=9)


def _multilabel_panels(bars, true: torch.Tensor, pred: torch.Tensor, classes: Sequence[str]):
    """Per-label recall bars (found / present); returns the heading and lines of the
    missed/false-label counts."""
    found, present = (true & pred).sum(0), true.sum(0)
    recall = (found.double() / present.clamp(min=1)).tolist()
    draw_bars(bars, recall, present, classes, "per-label recall", xlabel="recall")
    missed = (true & ~pred).sum(0).tolist()
    false = (~true & pred).sum(0).tolist()
    worst = sorted(range(len(classes)), key=lambda i: -(missed[i] + false[i]))[:5]
    lines = [f"{classes[i]}: {missed[i]} missed, {false[i]} false" for i in worst]
    return "most wrong labels", lines or ["none"]


@torch.no_grad()
def predict_split(module, datamodule, split: str, max_images: int = 2000, batch_size: int = 256):
    """(images uint8, true, pred) for the first ``max_images`` of ``datamodule.splits[split]``,
    preprocessed as in evaluation (the DataModule's eval batch transform), predicted as the
    module's task decides (``module.decision``; a plain network: multi-class)."""
    data = datamodule.splits[split]
    images, labels = data.images[:max_images], data.labels[:max_images]
    param = next(module.parameters())
    augment = datamodule.batch_augment(param.dtype)
    was_training = module.training
    module.eval()
    task: Task = getattr(module, "decision", None) or create_task()
    preds = []
    for start in range(0, len(images), batch_size):
        x = augment(images[start : start + batch_size], train=False)  # (B, C, H, W)
        logits = module(x.to(param.device)).float().cpu()
        preds.append(task.predicted(task.probabilities(logits)))  # as predict decides
    module.train(was_training)
    return images, labels, torch.cat(preds)


def write_split_mosaic(
    module, datamodule, split: str, path: Path, max_images: int = 2000, explain=None
) -> Path:
    """The mosaic of ``split`` (``val``/``test``) images as ``module`` predicts them;
    ``explain`` (uint8 images -> (n, H, W) heat maps, e.g. ``Explainer.heatmaps``) draws each
    tile's heat map over it."""
    images, true, pred = predict_split(module, datamodule, split, max_images)
    classes = list(getattr(module, "classes", None) or datamodule.spec["classes"])
    title = f"{split} images" + (" with heat maps" if explain else "")
    draw_mosaic(images, pred, classes, Path(path), true=true, title=title, heatmaps=explain)
    log.info("Saved %s", path)
    return Path(path)


def write_files_mosaic(
    rows: list[dict],
    classes: Sequence[str],
    path: Path,
    max_images: int = 256,
    side: int = 64,
    task: Task | None = None,
) -> Path:
    """The mosaic of ``predict``'s rows (``{"file", "labels", ...}``, top label first), read as
    ``task`` (the model's, ``predictor.task``; default multi-class) encodes labels. A file whose
    parent folder names its label (multi-class: an ImageFolder layout) has a known truth: when
    every file has one, wrong predictions are marked and the side panels drawn."""
    from PIL import Image

    task = task or create_task()
    rows = rows[:max_images]
    images, pred, true = [], [], []
    for row in rows:
        with Image.open(row["file"]) as img:
            thumb = img.convert("RGB").resize((side, side))
        images.append(torch.from_numpy(np.asarray(thumb).copy()).permute(2, 0, 1))  # (3, s, s)
        pred.append(task.encode(row["labels"], classes))
        true.append(task.label_of_folder(Path(row["file"]).parent.name, classes))
    if not images:
        raise ValueError("No readable images to draw: the prediction mosaic needs at least one.")
    known = all(t is not None for t in true)
    draw_mosaic(
        torch.stack(images),
        torch.stack(pred),
        list(classes),
        Path(path),
        true=torch.stack(true) if known else None,
        title=f"predictions of {len(rows)} files",
    )
    log.info("Saved %s", path)
    return Path(path)
