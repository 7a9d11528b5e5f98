"""Datasets larger than RAM: uint8 (C, H, W) images in litdata chunks, streamed from disk or an
object store (optional extra: ``pip install 'lightning-cls[streaming]'``).

``lightning_cls.data.chunks.write_streaming`` (``python -m lightning_cls.optimize_data``)
turns any DataModule's splits into ``<out>/<split>/`` chunk folders plus ``<out>/dataset.json``
(the dataset's description). ``StreamingDataModule`` is an ``ImageDataModule`` whose reader is litdata's
``StreamingDataset``/``StreamingDataLoader``: a bounded window of chunks is held at a time
(memory does not grow with the dataset), each DDP rank reads its own shard, and the loader's
position travels in checkpoints (mid-epoch resume). Spec, config check and the batched
augmentation on the batch's device are the base's, as for in-memory data.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import weakref
from collections.abc import Iterator, Mapping, Sequence

import torch

from lightning_cls.data.base import ImageDataModule
from lightning_cls.data.chunks import collate, labels_of, litdata, read_description
from lightning_cls.data.registry import register_dataset
from lightning_cls.inference.spec import Split

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")


class _LazySplits(Mapping):
    """``StreamingDataModule.splits``: each split is read into memory when first indexed."""

    def __init__(self, datamodule: StreamingDataModule):
        self.datamodule = datamodule

    def _names(self) -> list[str]:
        counts = self.datamodule.info["counts"]
        return [s for s in SPLITS if s in counts or (s == "val" and "test" in counts)]

    def __getitem__(self, split: str) -> Split:
        if split not in self._names():
            raise KeyError(split)
        return self.datamodule.read_split(split)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


@register_dataset("streaming")
class StreamingDataModule(ImageDataModule):
    """Train/val/test from litdata chunks written by ``write_streaming`` (``lightning_cls.optimize_data``).

    ``input_dir``: a local folder or an object-store URL (``s3://bucket/path``; credentials
    from the environment or ``storage_options``). ``cache_dir`` (default: a fresh temporary
    folder per run, removed at teardown) holds downloaded chunks, at most ``max_cache_size``.
    ``image_size`` below the stored size trains on random resized crops
    (``augment.random_resized_crop``) or centre crops, and evaluates on centre crops. The other
    options are ``ImageDataModule``'s; ``val_size``, ``pipeline`` and the ``DataLoader``
    settings have no use here (the splits are as written, batches come as uint8).
    """

    config_note = " (or null: as stored)"
    uint8_batches = True  # whatever data.pipeline says: the base's hook augments every batch

    def __init__(
        self,
        input_dir: str,
        image_size: int | None = None,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        cache_dir: str | None = None,
        max_cache_size: str = "2GB",
        storage_options: dict | None = None,
        max_split_images: int = 10_000,
        name: str = "streaming",
        folds: int | None = None,
        balanced_sampler: bool = False,
        **kwargs,
    ):
        # Splits are as written by optimize_data and chunks stream in order: no folds of train,
        # no class-balanced draws. Say so instead of ignoring the setting.
        if folds is not None:
            raise ValueError(
                f"data.folds={folds} is not supported with data=streaming (its splits are as "
                "written); write each fold's chunks with optimize_data, or use an in-memory "
                "dataset."
            )
        if balanced_sampler:
            raise ValueError(
                "data.balanced_sampler=true is not supported with data=streaming (chunks stream "
                "in order); use task.class_weights=auto instead."
            )
        if max_split_images < 1:
            raise ValueError(f"max_split_images must be >= 1, got {max_split_images}.")
        super().__init__(name=name, **kwargs)
        self.input_dir = str(input_dir).rstrip("/")
        self._image_size, self._mean, self._std = image_size, mean, std
        self.max_cache_size, self.storage_options = max_cache_size, storage_options or {}
        self.max_split_images = max_split_images
        self._own_cache = cache_dir is None
        self.cache_dir = cache_dir
        self._meta: dict | None = None
        self._read: dict[str, Split] = {}  # splits read into memory (``splits``)
        self.splits = self.read_splits()  # reads nothing until a split is indexed

    # -- what the data is: its description file ----------------------------------------------
    @property
    def info(self) -> dict:
        if self._meta is None:
            self._meta = read_description(self.input_dir, self._cache, self.storage_options)
        return self._meta

    @property
    def classes(self) -> list[str]:
        return list(self.info["classes"])

    @property
    def task(self) -> str:
        """``multiclass``, or ``multilabel`` for chunks written from a multi-label DataModule
        (a description written from a spec's dict holds its ``task`` entry: its name)."""
        task = self.info.get("task") or "multiclass"
        return str(task.get("name") or "multiclass" if isinstance(task, dict) else task)

    @property
    def num_channels(self) -> int:
        return int(self.info["num_channels"])

    @property
    def stored_size(self) -> int:
        return int(self.info["image_size"])

    @property
    def image_size(self) -> int:
        return self._image_size or self.stored_size

    @property
    def resize_size(self) -> int | None:  # trained on crops of the stored squares
        return self.stored_size if self.stored_size != self.image_size else None

    @property
    def mean(self) -> tuple[float, ...]:
        return tuple(self._mean if self._mean is not None else self.info["mean"])

    @property
    def std(self) -> tuple[float, ...]:
        return tuple(self._std if self._std is not None else self.info["std"])

    def describe(self, key: str, value) -> str:
        held = {"num_classes": "{} classes", "num_channels": "{}-channel images"}
        return f"{self.input_dir} holds {held[key].format(value)}"

    def _cache(self) -> str:
        # litdata's default cache is shared by every run reading the same URL and is never
        # cleaned, so a rewritten dataset could be read from stale chunks: one folder per run.
        if self.cache_dir is None:
            self.cache_dir = tempfile.mkdtemp(prefix="lightning_cls-stream-")
            # Removed at teardown under a Trainer; also when the DataModule is collected or the
            # process exits (stats, export and plain loops never call teardown).
            weakref.finalize(self, shutil.rmtree, self.cache_dir, True)
        return self.cache_dir

    # -- the reader: splits in memory on demand, loaders over the chunks ---------------------
    def read_splits(self) -> Mapping[str, Split]:
        """``{"train"|"val"|"test": Split}`` like every DataModule's, read on first access of
        each split: at most ``max_split_images`` images (a seeded, chunk-wise shuffled sample
        when the split holds more), at the stored size. Without a stored val split, "val" is
        the test split, as in ``val_dataloader``."""
        return _LazySplits(self)

    def _split_name(self, split: str) -> str:
        counts = self.info["counts"]
        return "test" if split == "val" and "val" not in counts and "test" in counts else split

    def read_split(self, split: str) -> Split:
        """One split in memory as uint8 ``(N, C, S, S)`` + labels (see ``read_splits``)."""
        if split in self._read:
            return self._read[split]
        stored = self._split_name(split)
        total = int(self.info["counts"].get(stored, 0))
        n = min(total, self.max_split_images)
        dataset = self.dataset(stored, shuffle=n < total)  # names the splits when it is missing
        if n < total:
            log.warning(
                "data=streaming: reading %d of the %d images of split '%s' into memory (a "
                "shuffled sample; data.max_split_images raises the cap).",
                n,
                total,
                stored,
            )
        size = self.stored_size
        images = torch.empty((n, self.num_channels, size, size), dtype=torch.uint8)
        items = []
        for i, item in zip(range(n), dataset):
            images[i] = torch.as_tensor(item["image"])  # (C, S, S) uint8
            items.append({"label": item["label"]})
        labels = labels_of(items) if items else torch.empty(0, dtype=torch.int64)
        self._read[split] = Split(images, labels)
        return self._read[split]

    def dataset(self, split: str, shuffle: bool):
        """litdata ``StreamingDataset`` of one split (each DDP rank sees its own shard)."""
        if split not in self.info.get("counts", {}):
            raise ValueError(
                f"{self.input_dir} has no '{split}' split; it has {sorted(self.info['counts'])}."
            )
        return litdata().StreamingDataset(
            f"{self.input_dir}/{split}",
            cache_dir=f"{self._cache()}/{split}",
            shuffle=shuffle,
            drop_last=False,
            seed=self.seed,
            max_cache_size=self.max_cache_size,
            storage_options=self.storage_options,
        )

    def make_loader(self, split: str, train: bool):
        """litdata's loader of the stored split (uint8 batches; its position: ``state_dict``)."""
        return litdata().StreamingDataLoader(
            self.dataset(self._split_name(split), shuffle=train),
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            collate_fn=collate,
        )

    def teardown(self, stage: str | None = None) -> None:
        if self._own_cache and self.cache_dir is not None and stage in (None, "fit", "test"):
            shutil.rmtree(self.cache_dir, ignore_errors=True)
            self.cache_dir = None
