"""Image decoding for inference: files or raw bytes -> the uint8 (C, H, W) layout models take.

The one decoder every path uses (the datasets of ``lightning_cls.data``, ``predict``, the
server), so an image served over HTTP is the same tensor it was in training and in ``predict``.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

# Suffixes taken when scanning folders (an image folder dataset, ``predict`` inputs).
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")

ImageSource = str | os.PathLike | bytes | bytearray | memoryview | BinaryIO

# What PIL raises on a file that is not an image, is truncated, or is corrupt.
DECODE_ERRORS = (
    UnidentifiedImageError,
    OSError,
    ValueError,
    SyntaxError,
    Image.DecompressionBombError,
)


def to_mode(img: Image.Image, num_channels: int) -> Image.Image:
    """Any PIL image -> upright "RGB" (3 channels) or "L" (1), with photo quirks handled.

    - EXIF orientation is applied (a phone's portrait JPEG is stored sideways).
    - 16-bit and 32-bit grayscale ("I;16", "I", "F") are scaled to 8 bits by their range
      (PIL's own convert would clip every value above 255 to white).
    - Transparency (RGBA, LA, palette with a transparent colour) is composited over white,
      so transparent pixels do not show whatever colour happens to be stored under them.
    - CMYK (and YCbCr, LAB, ...) are converted by PIL's formulas, without ICC profiles.
    """
    img = ImageOps.exif_transpose(img)
    if img.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        arr = np.asarray(img, dtype=np.float64)
        peak = 65535.0 if img.mode.startswith("I;16") or arr.max(initial=0) > 255 else 255.0
        if img.mode == "F" and arr.max(initial=0) <= 1.0:
            peak = 1.0  # float images in [0, 1]
        img = Image.fromarray(np.clip(arr * (255.0 / peak) + 0.5, 0, 255).astype(np.uint8), "L")
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        img = Image.alpha_composite(white, rgba)
    return img.convert("RGB" if num_channels == 3 else "L")


def decode_image(
    source: ImageSource, image_size: int, num_channels: int, resize_size: int | None = None
) -> np.ndarray:
    """A file path, raw encoded bytes or a binary file object -> (C, image_size, image_size) uint8.

    The shorter side is resized to ``resize_size`` (default ``image_size``) keeping the aspect
    ratio, then the centre ``image_size`` square is cut out: torchvision's eval preset
    ``Resize(resize_size)`` + ``CenterCrop(image_size)`` on a PIL image (bilinear, antialiased),
    pixel for pixel. Any mode is converted by ``to_mode`` (EXIF orientation, 16-bit, alpha), so
    a photo is the same tensor in training, ``predict`` and serving. JPEGs are decoded at a
    reduced DCT scale when that still leaves the shorter side >= ``resize_size`` (PIL's
    ``draft``): several times faster on large photos.
    """
    resize = image_size if resize_size is None else resize_size
    if image_size < 1 or resize < image_size:
        raise ValueError(
            f"Need 1 <= image_size <= resize_size, got image_size={image_size}, "
            f"resize_size={resize}; set the decode size to at least the image size."
        )
    if isinstance(source, (bytes, bytearray, memoryview)):
        source = io.BytesIO(bytes(source))
    with Image.open(source) as img:
        if img.format == "JPEG":
            img.draft("RGB" if num_channels == 3 else "L", _resized(img.size, resize))
        img = to_mode(img, num_channels)
        size = _resized(img.size, resize)
        if size != img.size:
            img = img.resize(size, Image.BILINEAR)
        # torchvision's CenterCrop offsets: int(round((size - crop) / 2))
        left, top = (int(round((n - image_size) / 2.0)) for n in size)
        if (left, top, *size) != (0, 0, image_size, image_size):
            img = img.crop((left, top, left + image_size, top + image_size))
        arr = np.asarray(img, dtype=np.uint8)  # (H, W, 3) or (H, W)
    return arr.transpose(2, 0, 1) if arr.ndim == 3 else arr[None]  # (C, H, W)


def _resized(size: tuple[int, int], short: int) -> tuple[int, int]:
    """(w, h) with the shorter side at ``short``: torchvision's ``Resize(int)`` arithmetic."""
    w, h = size
    if w <= h:
        return short, int(short * h / w)
    return int(short * w / h), short


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


def _file_kind(path: Path) -> str:
    """What a non-regular path is, for the failure reason."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return "missing or unreadable"
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a plain file"


def load_image_batch(
    paths: Sequence[Path], image_size: int, num_channels: int, resize_size: int | None = None
) -> tuple[np.ndarray, list[Path], list[tuple[Path, str]]]:
    """Decode ``paths``; return (uint8 batch (B, C, H, W), paths read, [(path, reason)] failed).

    The batch is a numpy array (``torch.from_numpy`` makes it a tensor without a copy): the
    ONNX and OpenVINO paths of ``predict`` never import torch. Only regular files are opened
    (a symlink to one counts): a FIFO, socket, device or folder with an image suffix is a
    failure row, never a read that blocks."""
    arrays, ok, failed = [], [], []
    for path in paths:
        if not path.is_file():  # a FIFO would block open() forever; a folder is no image
            failed.append((path, f"not a regular file ({_file_kind(path)}); skipped"))
            continue
        try:
            arrays.append(decode_image(path, image_size, num_channels, resize_size))
            ok.append(path)
        except DECODE_ERRORS as err:
            failed.append((path, decode_error_reason(err)))
    if not arrays:
        return np.empty((0, num_channels, image_size, image_size), np.uint8), ok, failed
    return np.stack(arrays), ok, failed  # (B, C, H, W) uint8


def check_batch_size(batch_size: int) -> None:
    """``batch_size`` an int >= 1, or one line naming it."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}.")
