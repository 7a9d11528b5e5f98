"""The in-memory source: splits held as uint8 tensors, and the loaders built over them.

``ImageDataModule``'s default reader and loader (``read_splits``/``make_loader``) call these:
validation carved out of train with a fixed seed, stratified by class (``carve_val``), and batches served by one of
two pipelines (``memory_loader``): ``TensorBatchLoader`` slices uint8 batches by a seeded
permutation (``pipeline="tensor"``), ``ArrayDataset`` in a ``DataLoader`` applies per-sample
PIL transforms (``pipeline="pil"``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from lightning_cls.data.folds import split_fold, stratified_pick
from lightning_cls.data.tensor_loader import TensorBatchLoader
from lightning_cls.inference.spec import Split
from lightning_cls.inference.threads import configure_threads, worker_init_fn


class ArrayDataset(Dataset):
    """Per-sample view of a ``Split`` for the PIL pipeline: uint8 CHW -> PIL -> transform."""

    def __init__(self, split: Split, transform: Callable | None):
        self.split, self.transform = split, transform

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, i: int):
        img = self.split.images[i]  # (C, H, W)
        pil = (
            Image.fromarray(img[0].numpy(), "L")
            if img.shape[0] == 1
            else Image.fromarray(img.permute(1, 2, 0).numpy(), "RGB")
        )
        label = self.split.labels[i]  # a class index, or a multi-hot row (multilabel)
        return (self.transform(pil) if self.transform else pil), (
            label if label.ndim else int(label)
        )


def carve_val(
    splits: dict[str, Split], val_size: int | float, folds: int | None, fold: int, seed: int
) -> dict[str, Split]:
    """``splits`` with a "val" split: fold ``fold`` of ``folds`` (train plus a dataset's own
    val), else the dataset's own, else ``val_size`` held out of train."""
    if folds:
        if "val" in splits:
            train, val = splits.pop("train"), splits.pop("val")
            splits["train"] = Split(
                torch.cat([train.images, val.images]), torch.cat([train.labels, val.labels])
            )
        splits["train"], splits["val"] = split_fold(splits["train"], folds, fold, seed)
    elif "val" not in splits:
        splits["train"], splits["val"] = hold_out(splits["train"], val_size, seed, "val")
    return splits


def memory_loader(data, split: Split, train: bool):
    """The loader of one in-memory split with the DataModule ``data``'s settings."""
    drop_last = data.drop_last and train
    if data.pipeline == "tensor":
        # Outside a Trainer the loader augments each batch with a generator seeded from
        # (seed, epoch, batch). Under one the batch is augmented after it reaches its device
        # (on_after_batch_transfer), seeded from the key the train loader yields with it.
        attached = getattr(data, "trainer", None) is not None
        return TensorBatchLoader(
            split.images,
            split.labels,
            data.batch_size,
            shuffle=train,
            drop_last=drop_last,
            seed=data.seed,
            augment=None if attached else data.batch_augment(),
            train=train,
            augment_key=attached and train,
            balanced=data.balanced_sampler and train,
        )
    if data.balanced_sampler:
        raise ValueError("data.balanced_sampler=true needs data.pipeline=tensor.")
    configure_threads(data.num_workers, on_cpu=data.on_cpu(), cap=data.cap_threads)
    transform = data.train_transform() if train else data.eval_transform()
    return DataLoader(
        ArrayDataset(split, transform),
        batch_size=data.batch_size,
        shuffle=train,
        drop_last=drop_last,
        num_workers=data.num_workers,
        pin_memory=data.pin_memory,
        persistent_workers=data.persistent_workers,
        worker_init_fn=worker_init_fn if data.num_workers > 0 else None,
    )


def hold_out(
    split: Split, size: int | float, seed: int, what: str, hint: str = ""
) -> tuple[Split, Split]:
    """Split off ``size`` (a fraction or a count) with a fixed ``seed``: returns (rest, held out).

    Single-label splits are stratified by class (``folds.stratified_pick``), so each class is
    held out in proportion. Multi-label splits ((N, K) label rows) are held out at random."""
    n = len(split)
    k = int(round(size * n)) if isinstance(size, float) else size
    fraction_ok = not isinstance(size, float) or 0 < size < 1
    if split.labels.ndim != 1:  # multi-label: no single class to stratify by
        if not (0 < k < n and fraction_ok):
            raise ValueError(_size_error(size, n, what, hint))
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        return split.subset(perm[k:]), split.subset(perm[:k])
    if not (fraction_ok and (isinstance(size, float) or 0 < k < n)):
        raise ValueError(_size_error(size, n, what, hint))
    held = torch.from_numpy(stratified_pick(split.labels.numpy(), size, seed))  # (M,)
    if not 0 < len(held) < n:
        raise ValueError(_size_error(size, n, what, hint))
    rest = torch.ones(n, dtype=torch.bool)
    rest[held] = False
    return split.subset(torch.nonzero(rest).squeeze(1)), split.subset(held)


def _size_error(size: int | float, n: int, what: str, hint: str) -> str:
    return (
        f"data.{what}_size={size} leaves no train or no {what} data out of {n} training "
        f"images; set data.{what}_size to a fraction in (0, 1) or a count from 1 to {n - 1}"
        f"{hint}."
    )
