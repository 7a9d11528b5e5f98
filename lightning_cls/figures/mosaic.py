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

from lightning_cls.figures import painting
from lightning_cls.fileio import atomic_savefig
from lightning_cls.inference.tasks import Task, create_task

log = logging.getLogger(__name__)


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


# A tile's cell, in pixels: the image square under two or three label lines. The side panels'
# width, the title band's height.
CELL_W, CELL_H, IMAGE_PX = 150, 170, 120
SIDE_W, TITLE_H = 500, 80


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


def _tile_canvas(tiles: list[np.ndarray], captions: list[str], wrong: list[bool], cols: int):
    """All tiles on one white (rows * CELL_H, cols * CELL_W, 3) canvas, each at the bottom of
    its cell inside a frame (3 px red for a wrong prediction, 1 px grey otherwise) under its
    caption (red when wrong)."""
    from PIL import Image, ImageDraw

    rows = max(1, -(-len(tiles) // cols))
    canvas = np.full((rows * CELL_H, cols * CELL_W, 3), 255, np.uint8)
    for n, (tile, bad) in enumerate(zip(tiles, wrong)):
        top = (n // cols) * CELL_H + CELL_H - IMAGE_PX - 6
        left = (n % cols) * CELL_W + (CELL_W - IMAGE_PX) // 2
        frame = 3 if bad else 1
        canvas[top - frame : top + IMAGE_PX + frame, left - frame : left + IMAGE_PX + frame] = (
            painting.RED if bad else (204, 204, 204)
        )
        canvas[top : top + IMAGE_PX, left : left + IMAGE_PX] = tile
    image = Image.fromarray(canvas)
    draw, font = ImageDraw.Draw(image), painting.font(7)
    for n, (caption, bad) in enumerate(zip(captions, wrong)):
        xy = ((n % cols + 0.5) * CELL_W, (n // cols + 1) * CELL_H - IMAGE_PX - 12)
        color = painting.RED if bad else (0, 0, 0)
        draw.multiline_text(xy, caption, font=font, fill=color, anchor="md", align="center")
    return np.asarray(image)


def draw_mosaic(
    images: torch.Tensor,  # (N, C, H, W) uint8
    pred: torch.Tensor,  # (N,) class indices, or (N, K) multi-hot (multi-label)
    classes: Sequence[str],
    path: Path,
    true: torch.Tensor | None = None,  # like pred, or None (unknown: no marks, no side panels)
    title: str = "predictions",
    tiles: int = 48,
    heatmaps=None,  # (N, H, W) in [0, 1], or a function of the tiles' images giving them
    task: Task | None = None,  # whose side panels (``task.labels.errors``); default multi-class
) -> Path:
    """Draw the mosaic to ``path``. ``heatmaps``: a heat map over each tile (``explain``'s
    maps, drawn half transparent), or a function of the shown images (n, C, H, W) that gives
    their maps, so only the tiles drawn are explained.

    Tiles, their captions and the side panels' bars and lines are painted with PIL
    (``figures.painting``); matplotlib draws the title and the bars' frame and ticks. 48
    matplotlib axes took about a second to lay out and render, 48 captions as matplotlib
    texts about 0.2 s: longer than a short training run itself."""
    order = _tile_order(true, pred, tiles)
    wrongs = _wrong(true, pred) if true is not None else None
    cols = min(8, max(1, len(order)))
    if callable(heatmaps):
        heatmaps = dict(zip(order, heatmaps(images[order])))
    wrong = [wrongs is not None and bool(wrongs[i]) for i in order]
    captions = []
    for n, i in enumerate(order):
        label = _names(pred[i], classes)
        if true is not None:
            label = f"pred {label}\ntrue {_names(true[i], classes)}" + (" ✗" if wrong[n] else "")
        captions.append(label)
    pixels = [_tile_pixels(images[i], None if heatmaps is None else heatmaps[i]) for i in order]
    grid = _tile_canvas(pixels, captions, wrong, cols)
    panels = _side_panels(true, pred, classes, task or create_task()) if true is not None else None
    height, side_w = grid.shape[0], 0
    if panels is not None:  # 30 px for the bars' title, 60 for their ticks and axis name
        bars, _, text = panels
        height = max(height, 30 + bars.shape[0] + 60 + text.shape[0])
        side_w = max(SIDE_W, 20 + max(bars.shape[1], text.shape[1]) + 20)
    fig = painting.figure(grid.shape[1] + side_w, height + TITLE_H)
    painting.paste(fig, grid, 0, height - grid.shape[0])  # under the title band
    if panels is not None:
        bars, (bars_title, xlabel), text = panels
        left, top = grid.shape[1] + 20, height - 30
        painting.axes_over(fig, bars, left, top - bars.shape[0], BARS_W, bars_title, xlabel)
        painting.paste(fig, text, left, top - bars.shape[0] - 60 - text.shape[0])
        correct = len(true) - int(wrongs.sum())
        title = f"{title}: {correct / max(1, len(true)):.1%} of {len(true)} correct"
    fig.suptitle(title, y=1 - TITLE_H / 2 / fig.bbox.height, va="center")
    atomic_savefig(fig, path, **painting.SAVE)
    return path


BARS_W = 260  # pixels of the side panel's bars (their names and counts left of them)


def _side_panels(true, pred, classes: Sequence[str], task: Task):
    """The painted bars of the task's per-class score (multi-class: accuracy; multi-label:
    recall), their title and axis name, and the lines under them (``task.labels.errors``)."""
    from PIL import Image, ImageDraw

    values, support, names, heading, lines = task.labels.errors(true, pred, classes)
    n = len(classes)
    pitch = 30 if n <= 12 else max(1, 600 // n)
    bars = painting.bars(values, support.tolist(), classes, pitch, BARS_W)
    font = painting.font(9)
    text = Image.new("RGB", (SIDE_W - 40, round(1.4 * font.size * (len(lines) + 2))), "white")
    ImageDraw.Draw(text).multiline_text(
        (0, 0), heading + "\n\n" + "\n".join(lines), font=font, fill="black", spacing=3
    )
    return bars, names, np.asarray(text)


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
    classes = list(getattr(module, "classes", None) or datamodule.spec.classes)
    title = f"{split} images" + (" with heat maps" if explain else "")
    task = getattr(module, "decision", None)
    draw_mosaic(
        images, pred, classes, Path(path), true=true, title=title, heatmaps=explain, task=task
    )
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
        pred.append(task.labels.encode(row["labels"], classes))
        true.append(task.labels.of_folder(Path(row["file"]).parent.name, classes))
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
        task=task,
    )
    log.info("Saved %s", path)
    return Path(path)
