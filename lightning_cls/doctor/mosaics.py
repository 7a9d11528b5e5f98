"""The report's pictures: duplicate groups side by side, likely label errors with the given and
the suggested label, and images a file check flagged. Drawn with matplotlib (Agg), written
through ``fileio.atomic_savefig``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from lightning_cls.fileio import atomic_savefig

Tile = tuple[np.ndarray, str, str]  # (C, H, W) uint8 image, caption, frame colour


CELL = 72  # pixels of each tile on the canvas (images are scaled up or down to fit)
COLOURS = {"red": (220, 30, 30), "orange": (240, 150, 0)}


def _cell(image: np.ndarray, colour: str) -> np.ndarray:
    """(C, H, W) uint8 -> (CELL, CELL, 3) uint8, nearest-neighbour scaled, framed in colour."""
    rgb = np.repeat(image, 3, 0) if image.shape[0] == 1 else image  # (3, H, W)
    h, w = rgb.shape[1:]
    scale = CELL / max(h, w)
    ys = np.minimum((np.arange(CELL) / scale).astype(int), h - 1)
    xs = np.minimum((np.arange(CELL) / scale).astype(int), w - 1)
    cell = rgb[:, ys][:, :, xs].transpose(1, 2, 0).copy()  # (CELL, CELL, 3)
    cell[:3], cell[-3:], cell[:, :3], cell[:, -3:] = (COLOURS[colour],) * 4
    return cell


def draw_tiles(rows: list[list[Tile]], title: str, path: Path) -> Path:
    """One canvas with a row per list of tiles (rows may differ in length), captions under
    each tile: one image and one axes, so hundreds of tiles draw in a second."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = max(len(r) for r in rows)
    pad_x, pad_y = 8, 30  # room for two caption lines under each tile
    width = max(cols * (CELL + pad_x), 640)  # room for the title over a narrow grid
    canvas = np.full((len(rows) * (CELL + pad_y), width, 3), 255, dtype=np.uint8)  # (H, W, 3)
    texts = []
    for r, tiles in enumerate(rows):
        for c, (image, caption, colour) in enumerate(tiles):
            y, x = r * (CELL + pad_y), c * (CELL + pad_x)
            canvas[y : y + CELL, x : x + CELL] = _cell(image, colour)
            texts.append((x + CELL / 2, y + CELL + 2, caption))
    inch = 90  # dpi: one canvas pixel per output pixel
    fig = plt.figure(figsize=(canvas.shape[1] / inch, canvas.shape[0] / inch + 0.4), dpi=inch)
    ax = fig.add_axes((0, 0, 1, canvas.shape[0] / (canvas.shape[0] + 0.4 * inch)))
    ax.imshow(canvas, interpolation="nearest")
    ax.axis("off")
    for x, y, caption in texts:
        ax.text(x, y, caption, fontsize=5.5, ha="center", va="top")
    fig.suptitle(title, fontsize=8, y=0.995)
    try:
        return atomic_savefig(fig, path, dpi=inch)
    finally:
        plt.close(fig)


def duplicates_mosaic(
    groups: list[dict], image_of: Callable, caption_of: Callable, path: Path, limit: int
) -> Path | None:
    """One row per group (cross-split groups first), at most 6 copies shown per row."""
    if not groups:
        return None
    rows = []
    for group in groups[:limit]:
        colour = "red" if group["cross_split"] else "orange"
        rows.append([(image_of(s, r), caption_of(s, r), colour) for s, r in group["members"][:6]])
    shown = f"{min(limit, len(groups))} of {len(groups)}"
    title = f"Duplicate groups ({shown}; red: across splits, orange: within one split)"
    return draw_tiles(rows, title, path)


def label_issues_mosaic(
    issues: list[dict], image_of: Callable, classes: list[str], path: Path, limit: int
) -> Path | None:
    """Flagged images, most confident mistake first: given label -> suggested label."""
    if not issues:
        return None
    tiles = [
        (
            image_of(issue["split"], issue["row"]),
            f"{issue['split']}:{issue['row']}\ngiven {classes[issue['given']]}"
            f" -> {classes[issue['suggested']]} ({issue['suggested_prob']:.2f})",
            "red",
        )
        for issue in issues[:limit]
    ]
    per_row = 8
    rows = [tiles[i : i + per_row] for i in range(0, len(tiles), per_row)]
    title = f"Likely label errors ({len(tiles)} of {len(issues)}): given -> suggested (probability)"
    return draw_tiles(rows, title, path)


def flagged_mosaic(flagged: list[tuple[str, str, int, str]], image_of, path: Path, limit: int):
    """Images a file or content check flagged: (check, split, row, note) each."""
    if not flagged:
        return None
    tiles = [
        (image_of(s, r), f"{check}\n{s}:{r} {note}", "orange") for check, s, r, note in flagged
    ]
    per_row = 8
    tiles = tiles[:limit]
    rows = [tiles[i : i + per_row] for i in range(0, len(tiles), per_row)]
    return draw_tiles(rows, f"Flagged images ({len(tiles)} of {len(flagged)})", path)
