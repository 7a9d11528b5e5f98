"""Decoding one image file into the uint8 layout every dataset and predictor uses."""

from __future__ import annotations

import os

import numpy as np
from PIL import Image

# Suffixes taken when scanning folders (an image folder dataset, ``predict`` inputs).
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


def decode_image(path: str | os.PathLike, image_size: int, num_channels: int) -> np.ndarray:
    """One file -> (C, H, W) uint8, converted to RGB/grayscale and resized to a square."""
    with Image.open(path) as img:
        img = img.convert("RGB" if num_channels == 3 else "L")
        if img.size != (image_size, image_size):
            img = img.resize((image_size, image_size), Image.BILINEAR)
        arr = np.asarray(img, dtype=np.uint8)  # (H, W, 3) or (H, W)
    return arr.transpose(2, 0, 1) if arr.ndim == 3 else arr[None]  # (C, H, W)
