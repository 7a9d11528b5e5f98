"""Stratified k-fold assignment and hold-out carve, the same on every machine.

``fold_ids(labels, k, seed)`` gives each sample the fold it validates in. Within each class the
samples are put in a seeded random order and dealt round-robin to the folds, starting where the
previous class stopped, so every fold holds each class in proportion (counts differ by at most
one per class, fold sizes by at most one overall). The order comes from numpy's PCG64 bit
generator with a fixed seed, whose stream numpy documents as stable across versions and
platforms (``numpy.random.Generator.permutation`` on a PCG64); torch's CPU generator is not used
because its stream is not promised across releases.

``stratified_pick(labels, size, seed)`` picks the images a validation or test carve holds out
of train: each class gives ``round(size * its count)`` (a fraction) or its proportional share
of ``size`` images (a count, largest remainders first), at least one where a fraction is asked
of a class of two or more, never a class's last image (unless a count asks for more than
that leaves); so a balanced folder gives a balanced
validation set. Seeded the same way, so every DDP rank and every resumed run carves the same.
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


def stratified_pick(labels, size: int | float, seed: int) -> np.ndarray:
    """(M,) int64, sorted: the samples held out of ``labels`` (N,) class indices. ``size`` is a
    fraction in (0, 1) or a count in [1, N)."""
    labels = np.asarray(labels, dtype=np.int64)
    classes, counts = np.unique(labels, return_counts=True)  # sorted: independent of data order
    if isinstance(size, float):
        take = np.rint(size * counts).astype(np.int64)  # round half to even, as round()
        take = np.where((counts >= 2) & (size > 0), np.maximum(take, 1), take)
        take = np.minimum(take, counts - 1)  # a class keeps at least one train image
        if not take.any():  # every class a single image: hold out the fraction of all
            take = _apportion(int(round(size * len(labels))), counts)
    else:
        take = _apportion(int(size), counts)
    rng = np.random.Generator(np.random.PCG64(seed))
    held = [np.empty(0, dtype=np.int64)]
    for cls, n_take in zip(classes, take):
        members = np.flatnonzero(labels == cls)
        held.append(members[rng.permutation(len(members))[:n_take]])  # one draw per class
    return np.sort(np.concatenate(held))


def _apportion(k: int, counts: np.ndarray) -> np.ndarray:
    """``k`` images split across classes in proportion to ``counts`` (Hamilton's largest
    remainders, ties to the lower class). A class gives its last image only when ``k`` cannot
    be met otherwise (a count larger than the images beyond one per class)."""
    share = k * counts / counts.sum()
    take = np.minimum(np.floor(share).astype(np.int64), counts - 1)
    order = np.lexsort((np.arange(len(counts)), -(share - np.floor(share))))
    for limit in (counts - 1, counts):
        while take.sum() < min(k, limit.sum()):  # a capped class's share goes to the next
            for c in order:
                if take.sum() < k and take[c] < limit[c]:
                    take[c] += 1
    return take


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
