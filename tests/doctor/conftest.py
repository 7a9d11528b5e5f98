"""Tiny image folders with planted problems, made in tmp_path (nothing downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest
from doctor_images import write_split


@pytest.fixture
def folder(tmp_path) -> Path:
    """train/ (2 classes x 12) and test/ (2 x 4) of distinct smooth pictures."""
    root = tmp_path / "images"
    write_split(root, "train", 12, seed=1)
    write_split(root, "test", 4, seed=2)
    return root
