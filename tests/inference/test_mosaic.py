"""The prediction mosaic (``figures.mosaic.draw_mosaic``), read back pixel by pixel: wrong
tiles framed and captioned in red, the side panels only when the truth is known."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from lightning_cls.figures.mosaic import CELL_H, CELL_W, IMAGE_PX, SIDE_W, TITLE_H, draw_mosaic
from lightning_cls.figures.painting import RED

CLASSES = [f"class{i}" for i in range(10)]


def _frame_and_caption(png: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Tile n's (first row) top-left frame pixel and its caption strip."""
    top = TITLE_H + CELL_H - IMAGE_PX - 6
    left = n * CELL_W + (CELL_W - IMAGE_PX) // 2
    caption = png[TITLE_H : top - 4, n * CELL_W : (n + 1) * CELL_W]
    return png[top - 1, left - 1], caption


def test_wrong_tiles_are_framed_and_captioned_in_red(tmp_path):
    images = torch.full((3, 3, 8, 8), 128, dtype=torch.uint8)
    true, pred = torch.tensor([0, 1, 2]), torch.tensor([0, 5, 2])  # tile 1 is wrong
    path = draw_mosaic(images, pred, CLASSES, tmp_path / "m.png", true=true)
    png = np.asarray(Image.open(path).convert("RGB"))
    assert png.shape[1] == 3 * CELL_W + SIDE_W  # tiles, then the side panels
    red = np.all(png == RED, axis=-1)
    for n, wrong in enumerate([False, True, False]):
        frame, caption = _frame_and_caption(png, n)
        assert tuple(frame) == (RED if wrong else (204, 204, 204))
        reds = np.all(caption == RED, axis=-1).sum()
        inked = (caption.min(-1) < 200).sum()  # the caption's pixels, any colour
        assert inked > 50 and (reds > 20 if wrong else reds == 0)
    assert red[:, 3 * CELL_W :].sum() == 0  # the 0% bar of class1 has no width: no red bar


def test_without_the_truth_no_frames_in_red_and_no_side_panels(tmp_path):
    images = torch.zeros((2, 1, 8, 8), dtype=torch.uint8)
    path = draw_mosaic(images, torch.tensor([3, 4]), CLASSES, tmp_path / "m.png")
    png = np.asarray(Image.open(path).convert("RGB"))
    assert png.shape[1] == 2 * CELL_W
    assert not np.all(png == RED, axis=-1).any()
