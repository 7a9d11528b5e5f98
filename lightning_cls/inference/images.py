"""Image decoding for inference: files or raw bytes -> the uint8 (C, H, W) layout models take.

The one decoder every path uses (datasets via ``lightning_cls.data.decode``, ``predict``, the
server), so an image served over HTTP is the same tensor it was in training and in ``predict``.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO, Union

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

# Suffixes taken when scanning folders (an image folder dataset, ``predict`` inputs).
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")

ImageSource = Union[str, os.PathLike, bytes, bytearray, memoryview, BinaryIO]

# What PIL raises on a file that is not an image, is truncated, or is corrupt.
DECODE_ERRORS = (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError)


def decode_image(source: ImageSource, image_size: int, num_channels: int) -> np.ndarray:
    """A file path, raw encoded bytes or a binary file object -> (C, H, W) uint8.

    Any mode PIL reads is converted to RGB (3 channels) or grayscale "L" (1 channel), and the
    image is resized (bilinear) to ``image_size`` x ``image_size``: a grayscale upload to an RGB
    model, or a larger photo, is converted the same way in ``predict``, training and serving.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        source = io.BytesIO(bytes(source))
    with Image.open(source) as img:
        img = img.convert("RGB" if num_channels == 3 else "L")
        if img.size != (image_size, image_size):
            img = img.resize((image_size, image_size), Image.BILINEAR)
        arr = np.asarray(img, dtype=np.uint8)  # (H, W, 3) or (H, W)
    return arr.transpose(2, 0, 1) if arr.ndim == 3 else arr[None]  # (C, H, W)


def decode_error_reason(err: BaseException) -> str:
    """A short human reason for a decoding failure (used in CSVs and HTTP 400 bodies)."""
    if isinstance(err, UnidentifiedImageError):
        return "not a readable image"
    if isinstance(err, Image.DecompressionBombError):
        return f"image too large to decode safely ({err})"
    return f"corrupt or truncated image ({err})"


def find_images(inputs: Iterable[str | Path]) -> list[Path]:
    """Expand files and folders (recursively) into a sorted list of candidate files.

    Inside folders only image suffixes are taken; files named explicitly are always kept, so
    a non-image given on purpose is reported, not ignored. A folder without any image file is
    an error naming the folder and the suffixes looked for.
    """
    inputs = list(inputs)
    files: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
            if not found:
                raise FileNotFoundError(
                    f"No image files in folder {path} (looked for {', '.join(IMAGE_SUFFIXES)}, "
                    "recursively); point inputs= at a folder of images or at image files."
                )
            files += found
        elif path.exists():
            files.append(path)
        else:
            raise FileNotFoundError(f"Input not found: {path}; give image files or a folder.")
    if not files:
        raise FileNotFoundError("No inputs given; pass inputs=<image files or a folder>.")
    return files


def load_image_batch(
    paths: Sequence[Path], image_size: int, num_channels: int
) -> tuple[torch.Tensor, list[Path], list[tuple[Path, str]]]:
    """Decode ``paths``; return (uint8 batch (B, C, H, W), paths read, [(path, reason)] failed)."""
    arrays, ok, failed = [], [], []
    for path in paths:
        try:
            arrays.append(decode_image(path, image_size, num_channels))
            ok.append(path)
        except DECODE_ERRORS as err:
            failed.append((path, decode_error_reason(err)))
    if not arrays:
        return torch.empty(0, num_channels, image_size, image_size, dtype=torch.uint8), ok, failed
    return torch.from_numpy(np.stack(arrays)), ok, failed  # (B, C, H, W) uint8
