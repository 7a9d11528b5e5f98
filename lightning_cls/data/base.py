"""``ImageDataModule``: the shared machinery of every dataset in lightning_cls.

A subclass only says how to get its splits as in-memory uint8 tensors (``load_splits``) and
what they are (``classes``, ``num_channels``, ``image_size``, ``mean``, ``std``). This class
carves a validation split with a fixed seed and serves loaders through one of two pipelines:

- ``pipeline="tensor"`` (default): batches sliced from the uint8 tensor by a seeded
  permutation (``TensorBatchLoader``); crop/flip/normalize run per batch on the batch's
  device (``on_after_batch_transfer`` under Lightning, inside the loader in a plain loop).
- ``pipeline="pil"``: the classic per-sample torchvision transforms in a ``DataLoader``
  (use it for arbitrary ``train_transform``/``eval_transform``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytorch_lightning as pl
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T

from lightning_cls.data.augment import BatchAugment
from lightning_cls.data.folds import split_fold
from lightning_cls.data.tensor_loader import TensorBatchLoader, batch_generator
from lightning_cls.inference.spec import Split
from lightning_cls.threads import configure_threads, worker_init_fn

PIPELINES = ("tensor", "pil")
# Network input dtype for Lightning's "*-true" precisions (the mixed ones take float32 input).
PRECISION_INPUT_DTYPES = {
    "bf16-true": torch.bfloat16,
    "16-true": torch.float16,
    "64-true": torch.float64,
}


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


class ImageDataModule(pl.LightningDataModule):
    # One label per image; a multi-label DataModule (data/multilabel.py) says "multilabel"
    # and gives (N, K) multi-hot float labels.
    task = "multiclass"
    classes: list[str]
    num_channels: int
    image_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __init__(
        self,
        batch_size: int = 64,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool = False,
        cap_threads: bool = False,
        drop_last: bool = False,
        pipeline: str = "tensor",
        crop_padding: int = 0,
        hflip: bool = False,
        channels_last: bool = False,
        train_transform: Callable | None = None,
        eval_transform: Callable | None = None,
        val_size: int | float = 0.1,
        seed: int = 42,
        num_classes: int | None = None,
        num_channels: int | None = None,
        image_size: int | None = None,
        name: str | None = None,
        auto_augment: str | None = None,
        random_erasing: float = 0.0,
        folds: int | None = None,
        fold: int = 0,
        balanced_sampler: bool = False,
    ):
        super().__init__()
        if pipeline not in PIPELINES:
            raise ValueError(f"Unknown pipeline '{pipeline}'; use one of {', '.join(PIPELINES)}.")
        if pipeline == "tensor" and (train_transform or eval_transform):
            raise ValueError(
                "train_transform/eval_transform are per-sample PIL transforms; "
                "set pipeline='pil' to use them."
            )
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        self.batch_size, self.num_workers = batch_size, num_workers
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.persistent_workers = persistent_workers and num_workers > 0
        self.cap_threads = cap_threads
        self.drop_last, self.pipeline = drop_last, pipeline
        self.crop_padding, self.hflip, self.channels_last = crop_padding, hflip, channels_last
        self._train_transform, self._eval_transform = train_transform, eval_transform
        self.val_size, self.seed = val_size, seed
        # Stronger augmentation (data/autoaugment.py), k-fold validation (data/folds.py), a
        # class-balanced train sampler (tensor pipeline); checked where they are used.
        self.auto_augment, self.random_erasing = auto_augment, random_erasing
        self.folds, self.fold, self.balanced_sampler = folds, fold, balanced_sampler
        # What the config promises (model configs interpolate these); checked in setup().
        self.expected = {
            "num_classes": num_classes,
            "num_channels": num_channels,
            "image_size": image_size,
        }
        self.name = name or type(self).__name__
        self.splits: dict[str, Split] = {}
        self._train_loader: TensorBatchLoader | None = None
        self._train_loader_state: dict | None = None  # from a checkpoint, for the next loader

    # -- what a subclass provides ------------------------------------------------------------
    def load_splits(self) -> dict[str, Split]:
        """Return ``{"train": ..., "test": ...}`` and optionally ``"val"``."""
        raise NotImplementedError

    # -- derived facts -----------------------------------------------------------------------
    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def spec(self) -> dict:
        """What a checkpoint or an exported model needs to know about its input."""
        return {
            "classes": list(self.classes),
            "mean": list(self.mean),
            "std": list(self.std),
            "image_size": self.image_size,
            "num_channels": self.num_channels,
        }

    def _check_config(self) -> None:
        for key, expected in self.expected.items():
            actual = getattr(self, key)
            if expected is not None and expected != actual:
                raise ValueError(
                    f"data.{key}={expected} but {type(self).__name__} has {key}={actual}; "
                    f"set data.{key}={actual}."
                )

    # -- Lightning hooks ----------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        splits = self.load_splits()
        self._check_config()
        if self.folds:  # k-fold: validate on fold `fold` of train (+ a dataset's own val)
            if "val" in splits:
                train, val = splits.pop("train"), splits.pop("val")
                splits["train"] = Split(
                    torch.cat([train.images, val.images]), torch.cat([train.labels, val.labels])
                )
            splits["train"], splits["val"] = split_fold(
                splits["train"], self.folds, self.fold, self.seed
            )
        elif "val" not in splits:
            splits["train"], splits["val"] = hold_out(
                splits["train"], self.val_size, self.seed, "val"
            )
        self.splits = splits

    def batch_augment(self, dtype: torch.dtype = torch.float32) -> BatchAugment:
        return BatchAugment.for_data(self, dtype)

    def train_dataloader(self):
        return self._loader("train", shuffle=True)

    def val_dataloader(self):
        return self._loader("val", shuffle=False)

    def test_dataloader(self):
        return self._loader("test", shuffle=False)

    def predict_dataloader(self):
        return self._loader("test", shuffle=False)

    def _loader(self, name: str, shuffle: bool):
        self.setup()
        split = self.splits[name]
        train = name == "train"
        drop_last = self.drop_last and train
        if self.pipeline == "tensor":
            # Outside a Trainer the loader augments each batch with a generator seeded from
            # (seed, epoch, batch). Under one the batch is augmented after it reaches its device
            # (on_after_batch_transfer), seeded from the key the train loader yields with it.
            attached = self._attached()
            loader = TensorBatchLoader(
                split.images,
                split.labels,
                self.batch_size,
                shuffle,
                drop_last,
                seed=self.seed,
                augment=None if attached else self.batch_augment(),
                train=train,
                augment_key=attached and train,
                balanced=self.balanced_sampler and train,
            )
            if train:
                if self._train_loader_state is not None:
                    loader.load_state_dict(self._train_loader_state)
                    self._train_loader_state = None
                self._train_loader = loader
            return loader
        if self.balanced_sampler:
            raise ValueError("data.balanced_sampler=true needs data.pipeline=tensor.")
        configure_threads(self.num_workers, on_cpu=self._on_cpu(), cap=self.cap_threads)
        transform = self.train_transform() if train else self.eval_transform()
        return DataLoader(
            ArrayDataset(split, transform),
            batch_size=self.batch_size,
            shuffle=shuffle,
            drop_last=drop_last,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers,
            worker_init_fn=worker_init_fn if self.num_workers > 0 else None,
        )

    def _attached(self) -> bool:
        return getattr(self, "trainer", None) is not None

    def _on_cpu(self) -> bool:
        if self._attached():
            return self.trainer.strategy.root_device.type == "cpu"
        return not torch.cuda.is_available()

    # Lightning restores a DataModule's state before configure_optimizers runs, so the train
    # loader's position survives even when a scheduler calls trainer.estimated_stepping_batches
    # (which builds the loader too early for the fit loop's own loader restore: Lightning #20550).
    def state_dict(self) -> dict:
        loader = self._train_loader
        return {"train_loader": loader.state_dict()} if loader is not None else {}

    def load_state_dict(self, state_dict: dict) -> None:
        self._train_loader_state = state_dict.get("train_loader")

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        """uint8 batch on its device -> augmented (train) or plain (eval) normalized batch.

        The train loader yields ``(x, y, key)``: the key travels with its batch, so the
        augmentation of batch ``i`` of epoch ``e`` is the same however far ahead Lightning
        fetches (no reading of the loader's position here). The input dtype follows
        ``trainer.precision``: Lightning casts float inputs for ``*-true`` precisions before
        this hook, when the batch is still uint8, so the cast happens here.
        """
        if self.pipeline != "tensor" or batch[0].dtype != torch.uint8:
            return batch
        x, y, *key = batch
        train = bool(self._attached() and self.trainer.training)
        generator = batch_generator(*key[0]) if train and key else None
        dtype = (
            PRECISION_INPUT_DTYPES.get(str(self.trainer.precision)) if self._attached() else None
        )
        x = self.batch_augment(dtype or torch.float32)(x, train=train, generator=generator)
        return x, y  # (B, C, H, W) float, (B,)

    # -- per-sample (PIL) transforms ----------------------------------------------------------
    def train_transform(self) -> Callable:
        if self._train_transform is not None:
            return self._train_transform
        steps: list = []
        if self.crop_padding:
            steps.append(T.RandomCrop(self.image_size, padding=self.crop_padding))
        if self.hflip:
            steps.append(T.RandomHorizontalFlip())
        steps += pil_auto_augment(self.auto_augment)
        erase = [T.RandomErasing(self.random_erasing)] if self.random_erasing else []
        return T.Compose(steps + self._to_normalized_tensor() + erase)

    def eval_transform(self) -> Callable:
        if self._eval_transform is not None:
            return self._eval_transform
        return T.Compose(self._to_normalized_tensor())

    def _to_normalized_tensor(self) -> list:
        return [T.ToTensor(), T.Normalize(self.mean, self.std)]


def pil_auto_augment(policy: str | None) -> list:
    """torchvision's transform for ``data.auto_augment`` (the PIL pipeline's equivalent)."""
    known = {
        None: [],
        "randaugment": [T.RandAugment()],
        "trivialaugment": [T.TrivialAugmentWide()],
        "autoaugment_cifar10": [T.AutoAugment(T.AutoAugmentPolicy.CIFAR10)],
    }
    if policy not in known:
        raise ValueError(
            f"Unknown data.auto_augment={policy!r}; use one of "
            "randaugment, trivialaugment, autoaugment_cifar10 or null."
        )
    return known[policy]


def hold_out(
    split: Split, size: int | float, seed: int, what: str, hint: str = ""
) -> tuple[Split, Split]:
    """Split off ``size`` (a fraction or a count) at random with a fixed ``seed``:
    returns (rest, held out)."""
    n = len(split)
    k = int(round(size * n)) if isinstance(size, float) else size
    if not 0 < k < n:
        raise ValueError(
            f"data.{what}_size={size} leaves no train or no {what} data out of {n} training "
            f"images; set data.{what}_size to a fraction in (0, 1) or a count from 1 to {n - 1}"
            f"{hint}."
        )
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return split.subset(perm[k:]), split.subset(perm[:k])


def as_split(images, labels) -> Split:
    """numpy/tensor images (N, H, W) or (N, H, W, C) uint8 + labels -> ``Split`` (N, C, H, W)."""
    x = torch.as_tensor(images)
    if x.dtype != torch.uint8:
        raise TypeError(f"Expected uint8 images, got {x.dtype}.")
    x = x[:, None] if x.ndim == 3 else x.permute(0, 3, 1, 2)
    return Split(x.contiguous(), torch.as_tensor(labels, dtype=torch.int64))


def check_channels(value: Sequence[float], num_channels: int, name: str) -> tuple[float, ...]:
    value = tuple(float(v) for v in value)
    if len(value) != num_channels:
        raise ValueError(
            f"{name} has {len(value)} values but the images have {num_channels} channels "
            f"({name}={list(value)}); set {name} to {num_channels} values, one per channel."
        )
    return value
