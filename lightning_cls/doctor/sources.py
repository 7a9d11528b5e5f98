"""The dataset as training reads it: a DataModule's splits, and the file behind each row.

The doctor calls the DataModule's own ``setup`` (same test hold-out, same validation carve
from ``val_size``/``folds`` and ``seed``), so a duplicate "across splits" is one training would
really see on both sides. A file-backed source (ImageFolder, a multi-label index) also names
the file of each row (``split_files``); an in-memory set (digits, synthetic, CIFAR-10 from
torchvision) has none, and the checks that read files are skipped with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

SPLITS = ("train", "val", "test")


@dataclass
class SplitView:
    name: str
    images: torch.Tensor  # (N, C, H, W) uint8, as training reads them
    labels: torch.Tensor  # (N,) int64; multi-label (N, K) multi-hot float
    files: list[str] | None  # the file of each row; None for in-memory sets


def read_views(datamodule) -> tuple[dict[str, SplitView], list[str]]:
    """Each split as a ``SplitView``, and the files the source could not decode.

    A file-backed source is set to skip unreadable files (``on_corrupt="skip"``) so that one
    bad file does not stop the check that is there to name it; nothing else is changed.
    """
    if hasattr(datamodule, "on_corrupt"):
        datamodule.on_corrupt = "skip"
    datamodule.prepare_data()
    datamodule.setup("fit")
    files = datamodule.split_files() if hasattr(datamodule, "split_files") else {}
    views = {}
    for name in SPLITS:
        if name not in datamodule.splits:
            continue
        split = datamodule.splits[name]
        listed = files.get(name)
        if listed is not None and len(listed) != len(split):
            raise RuntimeError(f"{name}: {len(listed)} files for {len(split)} rows (a bug).")
        views[name] = SplitView(name, split.images, split.labels, listed)
    unreadable = sorted(getattr(datamodule, "unreadable_files", []))
    return views, unreadable


def all_images(views: dict[str, SplitView]) -> tuple[torch.Tensor, list[tuple[str, int]]]:
    """Every split's images in one tensor, and (split, row) of each."""
    owners = [(v.name, row) for v in views.values() for row in range(len(v.images))]
    return torch.cat([torch.as_tensor(np.asarray(v.images)) for v in views.values()]), owners
