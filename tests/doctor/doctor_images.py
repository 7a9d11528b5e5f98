"""Pictures for the data-check tests: distinct smooth pictures and folders of them (a module
with a unique name: ``from conftest import ...`` would find another folder's conftest)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def smooth_image(seed: int, size: int = 40) -> Image.Image:
    """A random smooth RGB picture (an 8x8 colour grid, bicubic upscaled): distinct pictures'
    perceptual hashes are ~32 bits apart, and re-encoding or resizing one moves it a few."""
    grid = np.random.default_rng(seed).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    return Image.fromarray(grid, "RGB").resize((size, size), Image.BICUBIC)


def write_split(root: Path, split: str, per_class: int, classes=("a", "b"), seed: int = 0):
    """``root/split/<class>/<i>.png``; returns {(class, i): path}."""
    paths = {}
    for k, name in enumerate(classes):
        folder = root / split / name
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            path = folder / f"{i:03d}.png"
            smooth_image(seed * 1000 + k * 100 + i).save(path)
            paths[(name, i)] = path
    return paths
