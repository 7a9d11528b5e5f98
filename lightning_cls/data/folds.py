"""Stratified k-fold assignment that is the same on every machine.

``fold_ids(labels, k, seed)`` gives each sample the fold it validates in. Within each class the
samples are put in a seeded random order and dealt round-robin to the folds, starting where the
previous class stopped, so every fold holds each class in proportion (counts differ by at most
one per class, fold sizes by at most one overall). The order comes from numpy's PCG64 bit
generator with a fixed seed, whose stream numpy documents as stable across versions and
platforms (``numpy.random.Generator.permutation`` on a PCG64); torch's CPU generator is not used
because its stream is not promised across releases.
"""

from __future__ import annotations

import numpy as np
import torch

from lightning_cls.inference.spec import Split


def fold_ids(labels, k: int, seed: int) -> np.ndarray:
    """(N,) int64: the fold (0..k-1) whose validation set holds each sample."""
    labels = np.asarray(labels, dtype=np.int64)
    if not isinstance(k, int) or isinstance(k, bool) or k < 2:
        raise ValueError(f"data.folds={k!r} must be an integer >= 2 (or null for no k-fold).")
    if k > len(labels):
        raise ValueError(
            f"data.folds={k} is more than the {len(labels)} training images; set data.folds to "
            f"at most {len(labels)}."
        )
    rng = np.random.Generator(np.random.PCG64(seed))
    out = np.empty(len(labels), dtype=np.int64)
    start = 0
    for cls in np.unique(labels):  # sorted: the order does not depend on the data's order
        members = np.flatnonzero(labels == cls)
        members = members[rng.permutation(len(members))]
        out[members] = (start + np.arange(len(members))) % k
        start = (start + len(members)) % k
    return out


def split_fold(split: Split, k: int, fold: int, seed: int) -> tuple[Split, Split]:
    """(train, val) for ``fold`` of ``k``: val is that fold, train the other k-1."""
    if not isinstance(fold, int) or isinstance(fold, bool) or not 0 <= fold < k:
        raise ValueError(
            f"data.fold={fold!r} is not a fold of data.folds={k}; use 0..{k - 1} "
            f"(all of them: -m data.fold='range(0,{k})')."
        )
    ids = torch.from_numpy(fold_ids(split.labels.numpy(), k, seed))
    return split.subset(torch.nonzero(ids != fold).squeeze(1)), split.subset(
        torch.nonzero(ids == fold).squeeze(1)
    )
