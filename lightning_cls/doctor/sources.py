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


def all_rows(views: dict[str, SplitView]) -> tuple[Rows, list[tuple[str, int]]]:
    """Every split's images as one sequence (not copied), and (split, row) of each."""
    owners = [(v.name, row) for v in views.values() for row in range(len(v.images))]
    return Rows([v.images for v in views.values()]), owners


class Rows:
    """The images of several splits read as one (N, C, H, W) sequence without concatenating
    them (a large set's splits are memory-mapped caches): ``len``, ``shape``, an int index
    (one image) and a slice (a tensor of those rows) are what the checks use."""

    def __init__(self, parts: list):
        self.parts = parts
        self.starts = np.cumsum([0] + [len(p) for p in parts])  # (S + 1,)

    def __len__(self) -> int:
        return int(self.starts[-1])

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self), *self.parts[0].shape[1:])

    def __getitem__(self, index):
        if not isinstance(index, slice):
            k = int(np.searchsorted(self.starts, index, side="right")) - 1
            return self.parts[k][index - self.starts[k]]
        start, stop, _ = index.indices(len(self))
        pieces = []
        for k, part in enumerate(self.parts):
            lo, hi = max(start, self.starts[k]), min(stop, self.starts[k + 1])
            if lo < hi:
                pieces.append(torch.as_tensor(part[lo - self.starts[k] : hi - self.starts[k]]))
        return torch.cat(pieces) if pieces else torch.empty((0, *self.shape[1:]), dtype=torch.uint8)
