"""``ImageDataModule``: the one data contract every dataset in lightning_cls follows.

The base owns what every source shares: the options, ``spec`` (an ``InputSpec``), ``splits``,
the check of the config against the data (``data.num_classes=... but ...``), the loaders'
position in ``state_dict`` and the batch hook that augments uint8 batches on their device with
seeded draws. Sources differ only in their reader and the loader it builds (timm's
``ImageDataset(reader=create_reader(...))``):

- in memory (the default, ``data/memory.py``): a subclass says how to get its splits as uint8
  tensors (``load_splits``) and what they are (``classes``, ``num_channels``, ``image_size``,
  ``mean``, ``std``); ``pipeline="tensor"`` batches them with ``TensorBatchLoader`` (augmented
  on the batch's device), ``pipeline="pil"`` with per-sample torchvision transforms.
- streamed (``data/streaming.py``): ``read_splits`` and ``make_loader`` read litdata chunks.

Training augmentation is one object, ``augment`` (an ``AugmentPreset``, ``data/preset.py``),
which builds either pipeline's train transform; a source only names its ``default_augment``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytorch_lightning as pl
import torch
from torchvision import transforms as T

from lightning_cls.data.augment import BatchAugment
from lightning_cls.data.fingerprint import DataIndex, check_fingerprint
from lightning_cls.data.memory import carve_val, memory_loader
from lightning_cls.data.preset import AUGMENT_OPTIONS, AugmentPreset, resolve_augment
from lightning_cls.data.tensor_loader import batch_generator
from lightning_cls.inference.spec import InputSpec, Split

PIPELINES = ("tensor", "pil")
# Network input dtype for Lightning's "*-true" precisions (the mixed ones take float32 input).
PRECISION_INPUT_DTYPES = {
    "bf16-true": torch.bfloat16,
    "16-true": torch.float16,
    "64-true": torch.float64,
}


# What a DataModule says of its images: its ``spec``'s data fields, the keys a dataset
# description (``optimize_data``'s ``dataset.json``) holds.
DATA_FIELDS = ("classes", "mean", "std", "image_size", "num_channels", "resize_size")


def data_fields(spec: InputSpec | Mapping[str, Any]) -> dict[str, Any]:
    """``DATA_FIELDS`` of a DataModule's ``spec`` as plain containers (lists, not tuples);
    a plug-in DataModule's spec given as a plain mapping is returned as it is."""
    if not isinstance(spec, InputSpec):
        return dict(spec)
    fields = spec.to_dict()
    return {key: fields[key] for key in DATA_FIELDS}


class ImageDataModule(pl.LightningDataModule):
    # One label per image; a multi-label DataModule (data/multilabel.py) says "multilabel"
    # and gives (N, K) multi-hot float labels.
    task = "multiclass"
    classes: list[str]
    num_channels: int
    image_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    # Photos: the side the images are stored at, of which training crops image_size squares
    # (predict/serve: Resize(this) + CenterCrop(image_size)); None: stored at image_size.
    resize_size: int | None = None
    config_note = ""  # after the fix in the config check's message
    # Why ``fingerprint`` is None for this source (data/fingerprint.py; docs/data.md).
    fingerprint_note = "its images are built in or downloaded by name, not read from local files"
    # The registered preset (data/preset.py) used when no ``augment`` is given.
    default_augment = "none"

    def __init__(
        self,
        batch_size: int = 64,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool = False,
        cap_threads: bool = False,
        drop_last: bool = False,
        pipeline: str = "tensor",
        augment: AugmentPreset | str | Mapping | None = None,
        channels_last: bool = False,
        train_transform: Callable | None = None,
        eval_transform: Callable | None = None,
        val_size: int | float = 0.1,
        seed: int = 42,
        num_classes: int | None = None,
        num_channels: int | None = None,
        image_size: int | None = None,
        name: str | None = None,
        folds: int | None = None,
        fold: int = 0,
        balanced_sampler: bool = False,
        expect_fingerprint: str | None = None,
        **old_augment_options,
    ):
        """``augment``: the training augmentation, an ``AugmentPreset``, a registered preset's
        name (``"crop_flip"``) or None for the source's ``default_augment``. The options it
        holds (``hflip=``, ``crop_padding=``, ...) are still taken as keywords, deprecated."""
        super().__init__()
        unknown = sorted(set(old_augment_options) - set(AUGMENT_OPTIONS))
        if unknown:
            raise TypeError(
                f"{type(self).__name__}.__init__() got an unexpected keyword argument "
                f"'{unknown[0]}'"
            )
        augment = resolve_augment(
            augment, self.default_augment, old_augment_options, type(self).__name__
        )
        if augment.flip == "alternate" and pipeline == "pil":
            raise ValueError(
                "augment.flip=alternate needs data.pipeline=tensor (the per-sample pil pipeline "
                "does not know each image's epoch); use augment.flip=random with pipeline=pil."
            )
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
        # What training does to each image (data/preset.py): one object for both pipelines.
        self.augment, self.channels_last = augment, channels_last
        self._train_transform, self._eval_transform = train_transform, eval_transform
        # One seed for the validation split, shuffling and every augmentation draw.
        self.val_size, self.seed = val_size, seed
        # k-fold validation (data/folds.py), a class-balanced train sampler (tensor pipeline);
        # checked where they are used.
        self.folds, self.fold, self.balanced_sampler = folds, fold, balanced_sampler
        # What the config promises (model configs interpolate these); checked in setup().
        self.expected = {
            "num_classes": num_classes,
            "num_channels": num_channels,
            "image_size": image_size,
        }
        self.name = name or type(self).__name__
        # data.expect_fingerprint: refuse other files than those a fingerprint was taken of.
        self.expect_fingerprint = expect_fingerprint
        self._fingerprint: tuple[str | None] | None = None  # (digest,) once computed
        self.splits: Mapping[str, Split] = {}
        self._train_loader = None  # its position travels in state_dict
        self._train_loader_state: dict | None = None  # from a checkpoint, for the next loader

    # -- what a source provides: its reader and the loader it builds ----------------------------
    def load_splits(self) -> dict[str, Split]:
        """In memory: return ``{"train": ..., "test": ...}`` and optionally ``"val"``."""
        raise NotImplementedError

    def read_splits(self) -> Mapping[str, Split]:
        """``{"train"|"val"|"test": Split}``: ``load_splits`` with validation carved out of
        train (``val_size``, or fold ``fold`` of ``folds``) unless the source has its own."""
        return carve_val(self.load_splits(), self.val_size, self.folds, self.fold, self.seed)

    def make_loader(self, split: str, train: bool):
        """The loader of one split: in memory, a ``TensorBatchLoader`` or a ``DataLoader``."""
        self.setup()
        return memory_loader(self, self.splits[split], train)

    def data_index(self) -> DataIndex | None:
        """The local files this source reads, for its ``fingerprint``; None (the default:
        in memory, downloaded, streamed) when it reads no index of files (``fingerprint_note``)."""
        return None

    # -- derived facts -----------------------------------------------------------------------
    @property
    def fingerprint(self) -> str | None:
        """sha256 of the data index (its files and their content hashes, ``data/fingerprint.py``),
        computed once and checked against ``expect_fingerprint``; None: the source has no
        index of files (``fingerprint_note`` says why)."""
        if self._fingerprint is None:
            index = self.data_index()
            found = index.fingerprint() if index is not None else None
            what = f"data={self.name}" + (f" at {index.root}" if index is not None else "")
            check_fingerprint(found, self.expect_fingerprint, what, index, self.fingerprint_note)
            # Only the digest is kept: the file list of a large folder is not worth the memory.
            self._fingerprint = (found.hexdigest if found is not None else None,)
        return self._fingerprint[0]

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def spec(self) -> InputSpec:
        """What a checkpoint or an exported model needs to know about its input (the module
        takes it as ``ClassificationModule(..., spec=datamodule.spec)``)."""
        return InputSpec(
            classes=self.classes,
            mean=self.mean,
            std=self.std,
            image_size=self.image_size,
            num_channels=self.num_channels,
            resize_size=self.resize_size,
            task=self.task,
            data_fingerprint=self.fingerprint,
        )

    def describe(self, key: str, value: Any) -> str:
        """What the data holds, for the config check's message ("... but <this>; set ...")."""
        return f"{type(self).__name__} has {key}={value}"

    def check_config(self, keys: tuple[str, ...] | None = None) -> None:
        """Refuse a config value (``data.num_classes``, ...) the data contradicts, naming both;
        ``keys``: only those (``num_classes`` needs no split read: train checks it first)."""
        for key, expected in self.expected.items():
            if keys is not None and key not in keys:
                continue
            actual = getattr(self, key)
            if expected is not None and expected != actual:
                raise ValueError(
                    f"data.{key}={expected} but {self.describe(key, actual)}; "
                    f"set data.{key}={actual}{self.config_note}."
                )

    # -- Lightning hooks ----------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if not self.splits:  # read once (splits set beforehand, e.g. shared, are kept)
            self.splits = self.read_splits()
        self.check_config()
        _ = self.fingerprint  # data.expect_fingerprint refuses other files before any work

    def batch_augment(self, dtype: torch.dtype = torch.float32) -> BatchAugment:
        """The batched train/eval transform of this data's uint8 batches (``augment.batch``)."""
        return self.augment.batch(self.mean, self.std, self.image_size, self.channels_last, dtype)

    def train_dataloader(self):
        loader = self.make_loader("train", train=True)
        if hasattr(loader, "load_state_dict"):  # the PIL pipeline's DataLoader has no position
            if self._train_loader_state is not None:
                loader.load_state_dict(self._train_loader_state)
                self._train_loader_state = None
            self._train_loader = loader
        return loader

    def val_dataloader(self):
        return self.make_loader("val", train=False)

    def test_dataloader(self):
        return self.make_loader("test", train=False)

    def predict_dataloader(self):
        return self.make_loader("test", train=False)

    @property
    def uint8_batches(self) -> bool:
        """Whether the loaders yield uint8 batches for the batch hook to augment."""
        return self.pipeline == "tensor"

    def _attached(self) -> bool:
        return getattr(self, "trainer", None) is not None

    def on_cpu(self) -> bool:
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

        A train batch's draws come from ``batch_generator`` seeded with a key that travels with
        the batch (the in-memory loader yields ``(x, y, key)``), so the augmentation of batch
        ``i`` of epoch ``e`` is the same however far ahead Lightning fetches; a loader that
        cannot carry one (litdata's) is keyed by the trainer's epoch, step and rank, which a
        resumed run repeats. ``augment.flip=alternate`` flips by each image's index and the key's
        epoch (the loader's order for that epoch, so a resumed run flips the same images).
        The input dtype follows ``trainer.precision``: Lightning casts
        float inputs for ``*-true`` precisions before this hook, when the batch is still
        uint8, so the cast happens here.
        """
        if not self.uint8_batches or batch[0].dtype != torch.uint8:
            return batch
        x, y, *key = batch
        trainer = self.trainer if self._attached() else None
        train = bool(trainer and trainer.training)
        generator, where = None, {}
        dtype = PRECISION_INPUT_DTYPES.get(str(trainer.precision)) if trainer else None
        augment = self.batch_augment(dtype or torch.float32)
        if train:
            if key:
                seed, epoch, batch, *_ = key[0]
                indices = self._batch_indices(epoch, batch, len(x), augment)
                where = {"indices": indices, "epoch": epoch, "seed": seed}
            else:
                key = [(self.seed, trainer.current_epoch, trainer.global_step, trainer.global_rank)]
            generator = batch_generator(*key[0])
        x = augment(x, train=train, generator=generator, **where)
        return x, y  # (B, C, H, W) float, (B,)

    def _batch_indices(self, epoch: int, batch: int, size: int, augment) -> torch.Tensor | None:
        """The split indices of batch ``batch`` of ``epoch``, as the in-memory train loader
        ordered them (``alternate`` flips need them; None for any other flip or loader)."""
        loader = self._train_loader
        if augment.flip != "alternate" or not hasattr(loader, "indices"):
            return None
        cached = getattr(self, "_order", None)
        if cached is None or cached[0] != epoch:
            self._order = cached = (epoch, loader.indices(epoch))  # (per_rank,)
        start = batch * loader.batch_size
        return cached[1][start : start + size]

    # -- per-sample (PIL) transforms ----------------------------------------------------------
    def train_transform(self) -> Callable:
        if self._train_transform is not None:
            return self._train_transform
        return self.augment.pil(self.image_size, self.mean, self.std, self.resize_size)

    def eval_transform(self) -> Callable:
        if self._eval_transform is not None:
            return self._eval_transform
        return T.Compose(self._to_normalized_tensor())

    def _to_normalized_tensor(self) -> list:
        return [T.ToTensor(), T.Normalize(self.mean, self.std)]


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
