"""Tiny image folders generated in tmp_path (nothing downloads; the real CIFAR JPEGs are for benchmarks only)."""

from pathlib import Path

import numpy as np
import pytest
from PIL import Image


def write_folder(
    root: Path,
    split: str,
    classes: dict[str, int],
    size: int = 12,
    mode: str = "RGB",
    seed: int = 0,
):
    """``root/split/<class>/<i>.png`` with ``classes[name]`` images each; class k has mean k*40."""
    rng = np.random.default_rng(seed)
    for k, (name, count) in enumerate(classes.items()):
        folder = root / split / name
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            shape = (size, size, 3) if mode == "RGB" else (size, size)
            pixels = np.clip(rng.normal(k * 40 + 20, 10, shape), 0, 255).astype(np.uint8)
            Image.fromarray(pixels, mode).save(folder / f"{i:03d}.png")
    return root


@pytest.fixture
def image_root(tmp_path) -> Path:
    """3 classes x 10 train images (12x12 RGB PNG), no val/ or test/ folder."""
    return write_folder(tmp_path / "images", "train", {"cat": 10, "dog": 10, "eel": 10})


@pytest.fixture
def full_root(tmp_path) -> Path:
    """train/ (3 x 8), val/ (3 x 2) and test/ (3 x 3)."""
    root = tmp_path / "full"
    write_folder(root, "train", {"a": 8, "b": 8, "c": 8}, seed=1)
    write_folder(root, "val", {"a": 2, "b": 2, "c": 2}, seed=2)
    write_folder(root, "test", {"a": 3, "b": 3, "c": 3}, seed=3)
    return root


@pytest.fixture
def make_folder():
    """The ``write_folder`` helper, for tests that build their own layouts."""
    return write_folder
