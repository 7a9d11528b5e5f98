"""Stratified k-fold: a partition, class proportions kept, the same folds on every machine."""

import numpy as np
import pytest
import torch

from lightning_cls.data.digits import DigitsDataModule
from lightning_cls.data.folds import fold_ids, split_fold
from lightning_cls.inference.spec import Split


def test_fold_membership_is_pinned_for_a_tiny_label_list():
    # numpy's PCG64 stream is documented as stable: these must not change across machines,
    # numpy versions or torch versions (torch's RNG is not used).
    labels = [0, 0, 0, 1, 1, 1, 1, 2, 2, 0]
    assert fold_ids(labels, 3, seed=0).tolist() == [1, 2, 0, 1, 0, 2, 1, 0, 2, 0]
    assert fold_ids(labels, 3, seed=1).tolist() == [0, 1, 2, 2, 1, 0, 1, 0, 2, 0]


@pytest.mark.parametrize("k", [2, 3, 5])
def test_folds_partition_the_data_and_keep_class_proportions(k):
    rng = np.random.default_rng(0)
    labels = rng.choice(4, size=203, p=[0.5, 0.25, 0.15, 0.10])
    ids = fold_ids(labels, k, seed=7)
    assert sorted(set(ids.tolist())) == list(range(k))  # every sample in exactly one fold
    sizes = np.bincount(ids, minlength=k)
    assert sizes.sum() == len(labels) and sizes.max() - sizes.min() <= 1
    for cls in range(4):
        per_fold = np.bincount(ids[labels == cls], minlength=k)
        assert per_fold.max() - per_fold.min() <= 1  # stratified: the class split evenly


def test_split_fold_gives_disjoint_vals_covering_train():
    images = torch.arange(30, dtype=torch.uint8).view(30, 1, 1, 1)
    split = Split(images, torch.arange(30) % 3)
    vals = []
    for fold in range(3):
        train, val = split_fold(split, 3, fold, seed=0)
        assert len(train) + len(val) == 30
        assert not set(train.images.flatten().tolist()) & set(val.images.flatten().tolist())
        assert len(val) == 10 and sorted(torch.bincount(val.labels).tolist()) == [3, 3, 4]
        vals += val.images.flatten().tolist()
    assert sorted(vals) == list(range(30))


def test_datamodule_folds_cover_its_train_split_exactly_once():
    seen = []
    for fold in range(3):
        dm = DigitsDataModule(folds=3, fold=fold, seed=5)
        dm.setup()
        seen.append(dm.splits["val"].images.flatten(1))
        assert len(dm.splits["train"]) + len(dm.splits["val"]) == len(
            DigitsDataModule(folds=3, fold=0, seed=5).load_splits()["train"]
        )
    rows = torch.cat(seen)
    pool = DigitsDataModule().load_splits()["train"].images.flatten(1)
    assert len(rows) == len(pool)
    assert torch.equal(rows.unique(dim=0), pool.unique(dim=0))


def test_bad_fold_settings_are_named():
    split = Split(torch.zeros(4, 1, 1, 1, dtype=torch.uint8), torch.tensor([0, 1, 0, 1]))
    with pytest.raises(ValueError, match=r"data.fold=3 is not a fold of data.folds=3; use 0..2"):
        split_fold(split, 3, 3, seed=0)
    with pytest.raises(ValueError, match="data.folds=1 must be an integer >= 2"):
        fold_ids([0, 1], 1, seed=0)
    with pytest.raises(ValueError, match="data.folds=5 is more than the 4 training images"):
        fold_ids([0, 1, 0, 1], 5, seed=0)
