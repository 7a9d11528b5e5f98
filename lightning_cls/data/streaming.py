"""Datasets larger than RAM: uint8 (C, H, W) images in litdata chunks, streamed from disk or an
object store (optional extra: ``pip install 'lightning-cls[streaming]'``).

``write_streaming`` turns any DataModule's splits into ``<out>/<split>/`` chunk folders plus
``<out>/meta.json`` (classes, image size, channels, mean/std). ``StreamingDataModule`` reads
them with litdata's ``StreamingDataset``/``StreamingDataLoader``: a bounded window of chunks
is held at a time (memory does not grow with the dataset), each DDP rank reads its own shard,
and the loader's position travels in checkpoints (mid-epoch resume). Batches arrive as uint8
and get the same batched augmentation as the in-memory DataModules, on the batch's device.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytorch_lightning as pl
import torch

from lightning_cls.data.augment import BatchAugment
from lightning_cls.data.registry import register_dataset
from lightning_cls.inference.spec import Split

log = logging.getLogger(__name__)

META_FILE = "meta.json"
SPLITS = ("train", "val", "test")
_REMOTE = ("s3://", "gs://", "gcs://", "azure://", "az://", "r2://", "hf://")


def _litdata():
    try:
        import litdata
    except ImportError as err:
        raise ImportError(
            "data=streaming needs litdata: pip install 'lightning-cls[streaming]' (or pip install litdata)."
        ) from err
    return litdata


def write_streaming(
    splits: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    meta: Mapping,
    out_dir: str | Path,
    chunk_bytes: str = "64MB",
    progress: bool = True,
) -> Path:
    """Write ``{split: (images (N, C, H, W) uint8, labels (N,))}`` as litdata chunks + meta.json.

    Multi-label splits have (N, K) multi-hot labels: each sample's label is then a (K,) uint8
    tensor (set ``meta["task"] = "multilabel"``; ``optimize_data`` does).

    Everything is written into a temporary sibling folder that is renamed to ``out_dir`` at
    the end: an interrupted conversion never leaves a folder that looks complete.
    """
    from litdata.streaming.writer import BinaryWriter
    from tqdm import tqdm

    _litdata()
    out = Path(out_dir).expanduser()
    if out.exists():
        raise FileExistsError(f"{out} already exists; remove it or choose another out=.")
    tmp = Path(
        tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent if out.parent.exists() else None)
    )
    counts = {}
    try:
        for name, (images, labels) in splits.items():
            if images.dtype != torch.uint8 or images.ndim != 4:
                raise TypeError(
                    f"split {name}: expected (N, C, H, W) uint8, got {images.dtype} {tuple(images.shape)}."
                )
            writer = BinaryWriter(str(tmp / name), chunk_bytes=chunk_bytes)
            for i in tqdm(range(len(labels)), desc=f"{name} -> chunks", disable=not progress):
                writer[i] = {
                    "index": i,
                    "image": images[i].contiguous(),
                    "label": _label(labels[i]),
                }
            writer.done()
            writer.merge()
            counts[name] = len(labels)
        (tmp / META_FILE).write_text(json.dumps({**dict(meta), "counts": counts}, indent=2))
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(tmp), str(out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


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


def _label(label: torch.Tensor) -> int | torch.Tensor:
    """A stored label: a class index, or a multi-hot (K,) uint8 row (multi-label)."""
    return label.to(torch.uint8).contiguous() if label.ndim else int(label)


def _labels(items: Sequence[dict]) -> torch.Tensor:
    """(B,) int64 class indices, or (B, K) float32 multi-hot rows (multi-label chunks)."""
    first = items[0]["label"] if items else 0
    if isinstance(first, torch.Tensor) and first.ndim:
        return torch.stack([torch.as_tensor(it["label"]) for it in items]).float()
    return torch.tensor([int(it["label"]) for it in items], dtype=torch.int64)


def _collate(items: Sequence[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.stack([torch.as_tensor(it["image"]) for it in items])  # (B, C, H, W) uint8
    return images, _labels(items)


@register_dataset("streaming")
class StreamingDataModule(pl.LightningDataModule):
    """Train/val/test from litdata chunks written by ``write_streaming`` (``lightning_cls.optimize_data``).

    ``input_dir``: a local folder or an object-store URL (``s3://bucket/path``; credentials
    from the environment or ``storage_options``). ``cache_dir`` (default: a fresh temporary
    folder per run, removed at teardown) holds downloaded chunks, at most ``max_cache_size``.
    ``image_size`` below the stored size trains on random resized crops
    (``random_resized_crop``) or centre crops, and evaluates on centre crops.
    """

    def __init__(
        self,
        input_dir: str,
        batch_size: int = 64,
        num_workers: int = 0,
        image_size: int | None = None,
        random_resized_crop: bool = False,
        crop_padding: int = 0,
        hflip: bool = False,
        channels_last: bool = False,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        seed: int = 42,
        cache_dir: str | None = None,
        max_cache_size: str = "2GB",
        storage_options: dict | None = None,
        num_classes: int | None = None,
        num_channels: int | None = None,
        max_split_images: int = 10_000,
        name: str = "streaming",
        auto_augment: str | None = None,
        random_erasing: float = 0.0,
        folds: int | None = None,
        balanced_sampler: bool = False,
        **unused,
    ):
        super().__init__()
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
                "in order); use loss.class_weights=auto instead."
            )
        # Stronger augmentation runs in BatchAugment on each uint8 batch, as in memory.
        self.auto_augment, self.random_erasing = auto_augment, random_erasing
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        self.input_dir = str(input_dir).rstrip("/")
        self.remote = self.input_dir.startswith(_REMOTE)
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.crop_padding, self.hflip, self.channels_last = crop_padding, hflip, channels_last
        self.random_resized_crop = random_resized_crop
        self._image_size, self._mean, self._std = image_size, mean, std
        self.max_cache_size, self.storage_options = max_cache_size, storage_options or {}
        self.expected = {"num_classes": num_classes, "num_channels": num_channels}
        self.name = name
        if max_split_images < 1:
            raise ValueError(f"max_split_images must be >= 1, got {max_split_images}.")
        self.max_split_images = max_split_images
        self._splits: dict[str, Split] = {}
        self._own_cache = cache_dir is None
        self.cache_dir = cache_dir
        self._meta: dict | None = None
        self._train_loader = None
        self._train_loader_state: dict | None = None

    # -- what the data is ---------------------------------------------------------------------
    @property
    def info(self) -> dict:
        if self._meta is None:
            self._meta = self._read_meta()
        return self._meta

    @property
    def classes(self) -> list[str]:
        return list(self.info["classes"])

    @property
    def task(self) -> str:
        """``multiclass``, or ``multilabel`` for chunks written from a multi-label DataModule."""
        return str(self.info.get("task", "multiclass"))

    @property
    def num_classes(self) -> int:
        return len(self.classes)

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
    def mean(self) -> tuple[float, ...]:
        return tuple(self._mean if self._mean is not None else self.info["mean"])

    @property
    def std(self) -> tuple[float, ...]:
        return tuple(self._std if self._std is not None else self.info["std"])

    @property
    def spec(self) -> dict:
        spec = {
            "classes": self.classes,
            "mean": list(self.mean),
            "std": list(self.std),
            "image_size": self.image_size,
            "num_channels": self.num_channels,
        }
        if self.stored_size != self.image_size:
            spec["resize_size"] = self.stored_size  # trained on crops of the stored squares
        return spec

    def _read_meta(self) -> dict:
        if not self.remote:
            path = Path(self.input_dir).expanduser() / META_FILE
            if not path.is_file():
                raise FileNotFoundError(
                    f"{path} not found: data.input_dir must be a folder written by "
                    "`python -m lightning_cls.optimize_data data=... out=...`."
                )
            return json.loads(path.read_text())
        from litdata.streaming.downloader import get_downloader

        local = Path(self._cache()) / META_FILE
        try:
            get_downloader(
                self.input_dir, str(local.parent), [], self.storage_options
            ).download_file(f"{self.input_dir}/{META_FILE}", str(local))
        except Exception as err:  # boto/obstore raise their own types for auth and network errors
            raise ConnectionError(
                f"Cannot read {self.input_dir}/{META_FILE} ({type(err).__name__}: {err}). For an "
                "object store, give credentials in the environment (e.g. AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE) or data.storage_options, and check the URL."
            ) from err
        return json.loads(local.read_text())

    def _cache(self) -> str:
        # litdata's default cache is shared by every run reading the same URL and is never
        # cleaned, so a rewritten dataset could be read from stale chunks: one folder per run.
        if self.cache_dir is None:
            self.cache_dir = tempfile.mkdtemp(prefix="lightning_cls-stream-")
            # Removed at teardown under a Trainer; also when the DataModule is collected or the
            # process exits (stats, export and plain loops never call teardown).
            weakref.finalize(self, shutil.rmtree, self.cache_dir, True)
        return self.cache_dir

    # -- loaders ------------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        self._meta = self._read_meta()  # fails early on a wrong folder, URL or credentials
        held = {"num_classes": "{} classes", "num_channels": "{}-channel images"}
        for key, expected in self.expected.items():
            actual = getattr(self, key)
            if expected is not None and expected != actual:
                raise ValueError(
                    f"data.{key}={expected} but {self.input_dir} holds "
                    f"{held[key].format(actual)}; set data.{key}={actual} (or null: as stored)."
                )

    # -- the in-memory contract: what INT8 calibration, export=auto and stats read -------------
    @property
    def splits(self) -> Mapping[str, Split]:
        """``{"train"|"val"|"test": Split}`` like every DataModule's, read on first access of
        each split: at most ``max_split_images`` images (a seeded, chunk-wise shuffled sample
        when the split holds more), at the stored size. Without a stored val split, "val" is
        the test split, as in ``val_dataloader``."""
        return _LazySplits(self)

    def _split_name(self, split: str) -> str:
        counts = self.info["counts"]
        return "test" if split == "val" and "val" not in counts and "test" in counts else split

    def read_split(self, split: str) -> Split:
        """One split in memory as uint8 ``(N, C, S, S)`` + labels (see ``splits``)."""
        if split in self._splits:
            return self._splits[split]
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
        images = torch.empty(
            (n, self.num_channels, self.stored_size, self.stored_size), dtype=torch.uint8
        )
        items = []
        for i, item in zip(range(n), dataset):
            images[i] = torch.as_tensor(item["image"])  # (C, S, S) uint8
            items.append({"label": item["label"]})
        labels = _labels(items) if items else torch.empty(0, dtype=torch.int64)
        self._splits[split] = Split(images, labels)
        return self._splits[split]

    def dataset(self, split: str, shuffle: bool):
        """litdata ``StreamingDataset`` of one split (each DDP rank sees its own shard)."""
        if split not in self.info.get("counts", {}):
            raise ValueError(
                f"{self.input_dir} has no '{split}' split; it has {sorted(self.info['counts'])}."
            )
        litdata = _litdata()
        return litdata.StreamingDataset(
            f"{self.input_dir}/{split}",
            cache_dir=f"{self._cache()}/{split}",
            shuffle=shuffle,
            drop_last=False,
            seed=self.seed,
            max_cache_size=self.max_cache_size,
            storage_options=self.storage_options,
        )

    def _loader(self, split: str, train: bool):
        litdata = _litdata()
        return litdata.StreamingDataLoader(
            self.dataset(split, shuffle=train),
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            collate_fn=_collate,
        )

    def train_dataloader(self):
        loader = self._loader("train", train=True)
        if self._train_loader_state is not None:
            loader.load_state_dict(self._train_loader_state)
            self._train_loader_state = None
        self._train_loader = loader
        return loader

    def val_dataloader(self):
        return self._loader(self._split_name("val"), train=False)

    def test_dataloader(self):
        return self._loader("test", train=False)

    # The loader's position (litdata's state_dict) is saved with the DataModule: see
    # ImageDataModule.state_dict for why not through the fit loop.
    def state_dict(self) -> dict:
        loader = self._train_loader
        return {"train_loader": loader.state_dict()} if loader is not None else {}

    def load_state_dict(self, state_dict: dict) -> None:
        self._train_loader_state = state_dict.get("train_loader")

    def teardown(self, stage: str | None = None) -> None:
        if self._own_cache and self.cache_dir is not None and stage in (None, "fit", "test"):
            shutil.rmtree(self.cache_dir, ignore_errors=True)
            self.cache_dir = None

    # -- batched augmentation on the batch's device --------------------------------------------
    def batch_augment(self, dtype: torch.dtype = torch.float32) -> BatchAugment:
        return BatchAugment.for_data(self, dtype)

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        x, y = batch
        if x.dtype != torch.uint8:
            return batch
        trainer = self.trainer
        train = bool(trainer and trainer.training)
        generator = None
        if train:  # draws keyed by (seed, step, rank): a resumed run repeats them
            key = (self.seed * 1_000_003 + trainer.global_step) * 64 + trainer.global_rank
            generator = torch.Generator().manual_seed(key)
        return self.batch_augment()(x, train=train, generator=generator), y
