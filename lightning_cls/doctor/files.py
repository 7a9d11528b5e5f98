"""Checks of the image files themselves: empty, unreadable or truncated files, sizes far from
the rest, grayscale or CMYK files in an RGB set, EXIF-rotated photos.

Each file is opened with PIL and fully decoded (JPEGs at a reduced DCT scale, ``draft``: the
whole stream is still read, so truncation shows) with ``ImageFile.LOAD_TRUNCATED_IMAGES``
off, whatever the process set it to elsewhere. Files are read in threads: PIL's decoders
release the GIL.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
from PIL import Image, ImageFile

from lightning_cls.inference.images import DECODE_ERRORS

GRAY_MODES = ("1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F")
ORIENTATION_TAG = 0x0112  # EXIF Orientation: 1 is upright, 2-8 flips and rotations


@dataclass
class FileFacts:
    path: str
    bytes: int
    width: int = 0
    height: int = 0
    mode: str = ""
    orientation: int = 1
    problem: str = ""  # "", "empty", "unreadable" or "truncated"
    error: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def inspect_file(path: str) -> FileFacts:
    """What a file holds, or why it cannot be read (never raises for a bad image)."""
    try:
        size = os.path.getsize(path)
    except OSError as err:
        return FileFacts(path, 0, problem="unreadable", error=f"{type(err).__name__}: {err}")
    if size == 0:
        return FileFacts(path, 0, problem="empty", error="the file has 0 bytes")
    facts = FileFacts(path, size)
    try:
        with Image.open(path) as img:
            facts.width, facts.height, facts.mode = img.width, img.height, img.mode
            facts.orientation = int(img.getexif().get(ORIENTATION_TAG, 1) or 1)
            if img.format == "JPEG":
                img.draft(img.mode, (max(1, img.width // 8), max(1, img.height // 8)))
            img.load()
    except DECODE_ERRORS as err:
        text = f"{type(err).__name__}: {err}"
        truncated = facts.width and any(w in str(err).lower() for w in ("truncat", "broken"))
        facts.problem, facts.error = ("truncated" if truncated else "unreadable"), text
    return facts


def inspect_files(paths: list[str], workers: int = 2) -> list[FileFacts]:
    """``inspect_file`` of every path, in order, with truncated images refused."""
    previous = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            return list(pool.map(inspect_file, paths, chunksize=64))
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = previous


def file_findings(facts: list[FileFacts], num_channels: int, size_factor: float) -> dict:
    """Findings by check: lists of ``{"path", ...}`` records (see each key's ``why``)."""
    if size_factor <= 1:
        raise ValueError(f"doctor.size_factor={size_factor} must be > 1 (e.g. 4).")
    bad = [f for f in facts if f.problem]
    good = [f for f in facts if not f.problem]
    found = {
        "unreadable": [{"path": f.path, "problem": f.problem, "error": f.error} for f in bad],
        "size_outliers": _size_outliers(good, size_factor),
        "exif_rotated": [
            {"path": f.path, "orientation": f.orientation} for f in good if f.orientation != 1
        ],
    }
    if num_channels == 3:
        found["grayscale_files"] = [
            {"path": f.path, "mode": f.mode} for f in good if f.mode in GRAY_MODES
        ]
        found["cmyk_files"] = [{"path": f.path, "mode": f.mode} for f in good if f.mode == "CMYK"]
    return found


def _size_outliers(good: list[FileFacts], factor: float) -> list[dict]:
    """Files whose linear size (sqrt of the pixel count) is ``factor`` times below or above
    the median file's."""
    if not good:
        return []
    side = np.sqrt([float(f.width) * f.height for f in good])  # (N,)
    median = float(np.median(side))
    out = []
    for f, s in zip(good, side):
        ratio = s / median
        if ratio <= 1 / factor or ratio >= factor:
            out.append(
                {"path": f.path, "width": f.width, "height": f.height, "vs_median": round(ratio, 3)}
            )
    return out


def gray_content(images, tolerance: int = 2) -> np.ndarray:
    """Rows of an (N, 3, H, W) uint8 array whose three channels are equal (within
    ``tolerance``): grayscale pictures stored as RGB, whatever their files said."""
    spread = []
    for start in range(0, len(images), 4096):  # bounded memory on large sets
        x = np.asarray(images[start : start + 4096]).astype(np.int16)  # (n, 3, H, W)
        spread.append(np.abs(x - x[:, :1]).reshape(len(x), -1).max(1))
    if not spread:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate(spread) <= tolerance)
