"""Heat maps drawn over images: a colour ramp blended on the picture, saved as PNG.

Numpy only (no matplotlib): the server draws one per request. The ramp runs dark blue (0)
through cyan, green and yellow to red (1), like matplotlib's ``jet``.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from lightning_cls.fileio import atomic_path

# (position, R, G, B) stops of the ramp.
_STOPS = np.array(
    [
        (0.0, 0, 0, 143),
        (0.125, 0, 0, 255),
        (0.375, 0, 255, 255),
        (0.625, 255, 255, 0),
        (0.875, 255, 0, 0),
        (1.0, 128, 0, 0),
    ],
    dtype=np.float64,
)


def colorize(heat) -> np.ndarray:
    """(H, W) values in [0, 1] -> (H, W, 3) uint8 colours of the ramp."""
    heat = np.clip(np.asarray(heat, dtype=np.float64), 0, 1)
    channels = [np.interp(heat, _STOPS[:, 0], _STOPS[:, c]) for c in (1, 2, 3)]
    return np.stack(channels, -1).round().astype(np.uint8)


def blend(image, heat, alpha: float = 0.5) -> np.ndarray:
    """uint8 image (C, H, W) (C = 1 or 3) and its (H, W) heat map -> (H, W, 3) uint8 picture:
    ``(1 - alpha) * image + alpha * colour``."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha={alpha} must be between 0 and 1 (0: the image, 1: the map).")
    pixels = np.asarray(image)
    if pixels.ndim != 3 or pixels.shape[0] not in (1, 3):
        raise ValueError(
            f"blend takes one (C, H, W) image with 1 or 3 channels, got {pixels.shape}."
        )
    rgb = np.repeat(pixels, 3, 0) if pixels.shape[0] == 1 else pixels
    rgb = rgb.transpose(1, 2, 0).astype(np.float64)  # (H, W, 3)
    if rgb.shape[:2] != np.shape(heat):
        raise ValueError(f"heat map {np.shape(heat)} and image {rgb.shape[:2]} differ in size.")
    mixed = (1 - alpha) * rgb + alpha * colorize(heat)
    return np.clip(mixed.round(), 0, 255).astype(np.uint8)


def png_bytes(picture: np.ndarray, scale: int = 1) -> bytes:
    """(H, W, 3) uint8 -> PNG bytes, enlarged ``scale`` times (nearest: pixels stay sharp)."""
    from PIL import Image

    img = Image.fromarray(picture)
    if scale > 1:
        img = img.resize((img.width * scale, img.height * scale), Image.NEAREST)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def save_overlay(path: str | Path, image, heat, alpha: float = 0.5, scale: int = 1) -> Path:
    """Blend ``heat`` on ``image`` and write it to ``path`` as a PNG (atomically)."""
    data = png_bytes(blend(image, heat, alpha), scale)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)
