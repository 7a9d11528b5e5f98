"""The validation/test carve out of train is stratified by class (issue 56): a balanced folder
gives a balanced validation set, the same on every rank and run for a seed."""

import pytest
import torch

from lightning_cls.data.imagefolder import ImageFolderDataModule
from lightning_cls.data.memory import hold_out
from lightning_cls.inference.spec import Split


def _split(counts: list[int]) -> Split:
    """Row numbers as images; class c repeated counts[c] times, interleaved like a shuffle."""
    labels = torch.cat([torch.full((n,), c) for c, n in enumerate(counts)])
    labels = labels[torch.randperm(len(labels), generator=torch.Generator().manual_seed(3))]
    return Split(torch.arange(len(labels)), labels)


def _per_class(split: Split, k: int) -> list[int]:
    return torch.bincount(split.labels, minlength=k).tolist()


def test_a_balanced_folder_gives_a_balanced_validation_set(tmp_path, make_folder):
    root = make_folder(tmp_path / "pets", "train", {"cat": 15, "dog": 15, "eel": 15}, size=8)
    data = ImageFolderDataModule(str(root), image_size=8, cache=False, val_size=0.2, test_size=0.1)
    data.setup()
    assert _per_class(data.splits["test"], 3) == [2, 2, 2]  # round(0.1 * 15)
    assert _per_class(data.splits["val"], 3) == [3, 3, 3]  # round(0.2 * 13)
    assert _per_class(data.splits["train"], 3) == [10, 10, 10]
    # split_files replays the same carve: each file in one split, in its class's folder
    files = data.split_files()
    assert [f.split("/")[-2] for f in sorted(files["val"])] == ["cat"] * 3 + ["dog"] * 3 + [
        "eel"
    ] * 3
    every = [f for found in files.values() for f in found]
    assert len(every) == len(set(every)) == 45


@pytest.mark.parametrize("size", [0.2, 10])
def test_an_unbalanced_split_is_held_out_in_proportion(size):
    rest, val = hold_out(_split([30, 15, 5]), size, seed=0, what="val")
    assert _per_class(val, 3) == [6, 3, 1]
    assert _per_class(rest, 3) == [24, 12, 4]


def test_counts_are_proportional_within_one():
    counts = [37, 11, 23, 4, 9]
    for size in (0.15, 0.3, 17):
        _, val = hold_out(_split(counts), size, seed=5, what="val")
        fraction = size if isinstance(size, float) else size / sum(counts)
        for want, got in zip(counts, _per_class(val, len(counts))):
            assert abs(got - fraction * want) <= 1, (size, counts, _per_class(val, 5))
        if not isinstance(size, float):
            assert len(val) == size  # a count is met exactly


def test_a_class_keeps_its_last_image_and_gives_at_least_one():
    # 2 images: one held out even at 0.1; 1 image: stays in train even at 0.9
    _, val = hold_out(_split([2, 1, 20]), 0.1, seed=0, what="val")
    assert _per_class(val, 3) == [1, 0, 2]
    rest, val = hold_out(_split([2, 1, 20]), 0.9, seed=0, what="val")
    assert _per_class(rest, 3) == [1, 1, 2]


def test_same_seed_same_split_other_seed_other_split_and_no_overlap():
    split = _split([40, 25, 10])
    rest, val = hold_out(split, 0.2, seed=7, what="val")
    again_rest, again_val = hold_out(split, 0.2, seed=7, what="val")
    assert torch.equal(val.images, again_val.images) and torch.equal(rest.images, again_rest.images)
    _, other = hold_out(split, 0.2, seed=8, what="val")
    assert set(other.images.tolist()) != set(val.images.tolist())
    assert _per_class(other, 3) == _per_class(val, 3)
    assert not set(rest.images.tolist()) & set(val.images.tolist())
    assert sorted(rest.images.tolist() + val.images.tolist()) == list(range(75))
    assert torch.equal(split.labels[val.images], val.labels)  # rows keep their labels


def test_multilabel_rows_are_held_out_at_random_as_before():
    labels = (torch.arange(40 * 3).reshape(40, 3) % 2).float()  # (N, K) multi-hot
    rest, val = hold_out(Split(torch.arange(40), labels), 0.25, seed=4, what="val")
    perm = torch.randperm(40, generator=torch.Generator().manual_seed(4))
    assert val.images.tolist() == perm[:10].tolist() and rest.images.tolist() == perm[10:].tolist()


def test_singleton_classes_still_give_a_count_or_fraction():
    # 8 classes of one image each (a tiny archive): the count comes out of whole classes
    _, val = hold_out(_split([1] * 8), 3, seed=0, what="val")
    assert len(val) == 3
    _, val = hold_out(_split([1] * 8), 0.25, seed=0, what="val")
    assert len(val) == 2


@pytest.mark.parametrize("size", [0.0, 1.0, 0, 20])
def test_sizes_that_leave_a_split_empty_are_refused(size):
    with pytest.raises(ValueError, match=r"data\.val_size=.* leaves no train or no val data"):
        hold_out(_split([10, 10]), size, seed=0, what="val")
