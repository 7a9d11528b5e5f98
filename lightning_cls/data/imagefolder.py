"""``ImageFolderDataModule``: a user's own images in ``root/train/<class>/*``.

Optional ``root/val`` and ``root/test`` with the same class folders are used as given;
without them, test (then val) is held out of train with a fixed seed. Every image is decoded
once — converted to RGB or grayscale, its shorter side resized to ``decode_size`` (aspect ratio
kept) and the centre square cut out — into an in-memory uint8 split, cached on disk
(``lightning_cls.data.cache``) so the next run memory-maps it.

Photos (``decode_size`` > ``image_size``, e.g. 256 and 224): training takes a per-sample
``RandomResizedCrop(image_size)`` of the cached square (``augment.random_resized_crop=true``),
evaluation its centre ``image_size`` crop — torchvision's ``Resize(256)`` + ``CenterCrop(224)``
pixel for pixel, since the centre crop lies inside the cached centre square. Squares keep the
cache one dense (N, C, S, S) array that memory-maps and batches without padding; the cost is
that a training crop of a wide photo never reaches beyond the centre square.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torchvision import transforms as T

from lightning_cls.data import cache as image_cache
from lightning_cls.data.base import ImageDataModule, check_channels
from lightning_cls.data.file_index import (
    files_of_splits,
    normalized,
    read_file_index,
    unreadable_of,
)
from lightning_cls.data.fingerprint import DataIndex
from lightning_cls.data.memory import hold_out
from lightning_cls.data.registry import register_dataset
from lightning_cls.inference.images import IMAGE_SUFFIXES
from lightning_cls.inference.spec import Split
from lightning_cls.inference.threads import available_cores

log = logging.getLogger(__name__)

ON_CORRUPT = ("fail", "skip")
# ImageNet statistics: a sensible start for photos; run `python -m lightning_cls.stats` for yours.
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
GRAY_MEAN, GRAY_STD = (0.449,), (0.226,)


def _images_in(folder: Path) -> list[Path]:
    return sorted(
        p
        for p in folder.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in IMAGE_SUFFIXES
    )


def scan_split(split_dir: Path) -> tuple[list[str], list[Path], list[int]]:
    """Class names (sorted folder names), image files and their labels of one split folder."""
    classes = sorted(
        p.name for p in split_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
    )
    if not classes:
        loose = " (it holds image files directly)" if _images_in(split_dir) else ""
        raise ValueError(
            f"{split_dir} has no class folders{loose}; put each class's images in "
            f"{split_dir}/<class name>/."
        )
    files: list[Path] = []
    labels: list[int] = []
    for label, name in enumerate(classes):
        found = _images_in(split_dir / name)
        if not found:
            raise ValueError(
                f"Class folder {split_dir / name} has no images ({', '.join(IMAGE_SUFFIXES)}); "
                "add images to it or remove the folder."
            )
        files += found
        labels += [label] * len(found)
    return classes, files, labels


@register_dataset("imagefolder")
class ImageFolderDataModule(ImageDataModule):
    class_source = "class folders"  # what train_dir holds the classes as (error messages)
    config_note = " or leave it unset"  # null: one class per folder (label)

    def __init__(
        self,
        root: str,
        image_size: int = 32,
        num_channels: int = 3,
        num_classes: int | None = None,
        on_corrupt: str = "fail",
        cache: bool = True,
        cache_dir: str | None = None,
        decode_workers: int | None = None,
        test_size: float = 0.1,  # a fraction of train, or an image count (int)
        split_seed: int = 0,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        decode_size: int | None = None,
        index: str | None = None,
        **kwargs,
    ):
        """``root`` holds ``train/<class>/*`` (+ optional ``val/``, ``test/``). ``num_classes``
        (optional) is checked against the class folders. ``on_corrupt``: "fail" names the
        first unreadable file, "skip" leaves such files out (``self.skipped``). ``cache``
        keeps decoded arrays in ``cache_dir`` (default ``<root>/.lightning_cls_cache``).
        ``mean``/``std`` default to ImageNet's. ``decode_size`` (default ``image_size``) is the
        side of the cached squares; ``augment.random_resized_crop`` trains on random resized
        crops of them (torchvision's default scale/ratio). ``index``: a CSV of the files to keep (the
        doctor's cleaned index, ``data/file_index.py``); others are left out. Other keyword
        arguments go to
        ``ImageDataModule`` (batch_size, pipeline, augment, val_size, seed, ...).
        """
        super().__init__(num_classes=num_classes, **kwargs)
        if num_channels not in (1, 3):
            raise ValueError(f"num_channels must be 1 (grayscale) or 3 (RGB), got {num_channels}.")
        if on_corrupt not in ON_CORRUPT:
            raise ValueError(
                f"Unknown on_corrupt '{on_corrupt}'; use one of {', '.join(ON_CORRUPT)}."
            )
        if image_size < 1:
            raise ValueError(f"image_size must be >= 1, got {image_size}.")
        decode_size = image_size if decode_size is None else decode_size
        if decode_size < image_size:
            raise ValueError(
                f"data.decode_size={decode_size} is smaller than data.image_size={image_size}; "
                f"set data.decode_size >= {image_size} (e.g. {round(image_size * 8 / 7)}, "
                "torchvision's 256 for 224)."
            )
        self.decode_size = decode_size
        self.root = Path(root).expanduser()
        self.image_size, self.num_channels = image_size, num_channels
        self.on_corrupt, self.cache, self.cache_dir = on_corrupt, cache, cache_dir
        self.decode_workers = decode_workers or available_cores()
        # The held-out test split must not move when the training seed changes (a model
        # trained with seed=7 and evaluated with seed=42 would otherwise see test images).
        self.test_size, self.split_seed = test_size, split_seed
        default_mean, default_std = (
            (IMAGENET_MEAN, IMAGENET_STD) if num_channels == 3 else (GRAY_MEAN, GRAY_STD)
        )
        self.mean = check_channels(
            mean if mean is not None else default_mean, num_channels, "data.mean"
        )
        self.std = check_channels(std if std is not None else default_std, num_channels, "data.std")
        self.skipped: list[str] = []  # unreadable files left out (on_corrupt="skip")
        self.index = index
        self._keep: set[str] | None = None  # the index's files, read on first scan
        self._split_files: dict[str, list[str]] = {}  # folder split -> file of each decoded row
        self._split_labels: dict[str, list] = {}
        self.unreadable_files: list[str] = []  # paths of files that failed to decode
        self._classes: list[str] | None = None

    # -- the class list comes from train/'s folders, without decoding anything -----------------
    @property
    def train_dir(self) -> Path:
        if not self.root.is_dir():
            raise FileNotFoundError(
                f"ImageFolder root {self.root} does not exist; set data.root to a folder "
                "with train/<class>/<images> (and optionally val/ and test/)."
            )
        train = self.root / "train"
        if not train.is_dir():
            raise FileNotFoundError(
                f"{self.root} has no train/ folder; expected {train}/<class>/<images>, "
                f"e.g. {train}/cat/0001.jpg."
            )
        return train

    @property
    def classes(self) -> list[str]:
        if self._classes is None:
            self._classes = scan_split(self.train_dir)[0]
        return self._classes

    def describe(self, key: str, value) -> str:
        if key == "num_classes":
            names = ", ".join(self.classes[:10]) + (", ..." if len(self.classes) > 10 else "")
            return f"{self.train_dir} has {value} {self.class_source}: {names}"
        return super().describe(key, value)

    # -- splits --------------------------------------------------------------------------------
    def prepare_data(self) -> None:
        """Build the caches once (Lightning calls this on one process; DDP ranks then read them)."""
        if self.cache:
            for name in self._splits_on_disk():
                self._load(name)

    def load_splits(self) -> dict[str, Split]:
        return self._hold_out_test({name: self._load(name) for name in self._splits_on_disk()})

    def _hold_out_test(self, splits: dict[str, Split]) -> dict[str, Split]:
        if "test" not in splits:
            log.info(
                "%s has no test/ folder: holding out %s of train as test (split_seed %d).",
                self.root,
                self.test_size,
                self.split_seed,
            )
            hint = f", or add a {self.root / 'test'} folder"
            splits["train"], splits["test"] = hold_out(
                splits["train"], self.test_size, self.split_seed, "test", hint
            )
        return splits

    def split_files(self) -> dict[str, list[str]]:
        """The image file behind each row of ``self.splits[name]`` (after ``setup``)."""
        return files_of_splits(self, self._split_files, self._split_labels)

    def _splits_on_disk(self) -> list[str]:
        return [
            name
            for name in ("train", "val", "test")
            if name == "train" or (self.root / name).is_dir()
        ]

    def data_index(self) -> DataIndex:
        """Every image of train/ (and val/, test/) that ``data.index`` keeps (all without one)."""
        files = [str(f) for split in self._splits_on_disk() for f in self._listed(split)[1]]
        return DataIndex(self.root, files, self._cache_dir())

    def _cache_dir(self) -> Path | None:
        root = str(self.root)
        return image_cache.writable_cache_dir(root, self.cache_dir) if self.cache else None

    def _listed(self, split: str) -> tuple[Path, list[Path], list[int]]:
        """A split's folder, the image files it holds that ``data.index`` keeps, their labels."""
        split_dir = self.train_dir if split == "train" else self.root / split
        classes, files, labels = scan_split(split_dir)
        unknown = sorted(set(classes) - set(self.classes))
        if unknown:
            raise ValueError(
                f"{split_dir} has class folders not in {self.train_dir}: {', '.join(unknown)}; "
                "every split must use the train classes."
            )
        index = {name: i for i, name in enumerate(self.classes)}
        labels = [index[classes[i]] for i in labels]
        return (split_dir, *self._filter_by_index(split_dir, files, labels))

    def _load(self, split: str) -> Split:
        split_dir, files, labels = self._listed(split)
        images, labels = self._decode_cached(split, [str(f) for f in files], labels)
        return Split(torch.from_numpy(images), torch.as_tensor(labels, dtype=torch.int64))

    def _filter_by_index(self, split_dir: Path, files: list[Path], labels: list[int]):
        """The files ``data.index`` lists (all of them without one), with their labels."""
        if self.index is None:
            return files, labels
        if self._keep is None:
            self._keep = read_file_index(self.index, self.root)
        kept = [(f, y) for f, y in zip(files, labels) if normalized(f) in self._keep]
        if not kept:
            raise ValueError(
                f"data.index={self.index} lists none of the {len(files)} images in {split_dir}; "
                "write the index for this data.root, or set data.index=null."
            )
        return [f for f, _ in kept], [y for _, y in kept]

    def _decode_cached(self, split: str, files: list[str], labels: list, cache_tag: str = ""):
        """Decoded images of ``files`` (cached) and the labels of those that decoded.
        ``cache_tag`` names the cache apart and enters its fingerprint: labels that do not
        follow from the file paths (a multi-label index) must invalidate it when they change."""
        root = str(self.root)
        name = image_cache.cache_name(root, split + cache_tag, self.decode_size, self.num_channels)
        key = image_cache.fingerprint(
            root,
            files,
            self.decode_size,
            self.num_channels,
            json.dumps(labels) if cache_tag else "",
        )
        cache_dir = self._cache_dir()
        if cache_dir is not None and (hit := image_cache.load_cache(cache_dir, name, key)):
            images, meta = hit
            self._handle_unreadable(meta["skipped"], split)
            self._remember(split, files, unreadable_of(files, meta["skipped"]), meta["labels"])
            return images, meta["labels"]
        log.info(
            "Decoding %d images of %s with %d workers...", len(files), split, self.decode_workers
        )
        images, errors = image_cache.decode_images(
            files, self.decode_size, self.num_channels, self.decode_workers
        )
        skipped = [f"{files[i]}: {e}" for i, e in errors]
        self._handle_unreadable(skipped, split)
        bad = {i for i, _ in errors}
        keep = [i for i in range(len(files)) if i not in bad]
        if bad:
            images, labels = images[keep], [labels[i] for i in keep]
        self._remember(split, files, {files[i] for i in bad}, labels)
        if not keep:
            raise ValueError(
                f"No readable images in {self.root / split}: all {len(files)} files failed to "
                f"decode (first: {skipped[0]}). Fix or replace them (e.g. re-save them as PNG), "
                "or point data.root at another folder."
            )
        if cache_dir is not None:
            meta = {"fingerprint": key, "labels": labels, "skipped": skipped, "root": root}
            image_cache.write_cache(cache_dir, name, np.ascontiguousarray(images), meta)
            log.info("Cached %s decoded images in %s.", split, cache_dir / f"{name}.npy")
        return images, labels

    def _remember(self, split: str, files: list[str], bad: set[str], labels: list) -> None:
        """Which file each decoded row of ``split`` came from (``split_files``)."""
        self._split_files[split] = [f for f in files if f not in bad]
        self.unreadable_files = sorted(set(self.unreadable_files) | bad)
        self._split_labels[split] = labels

    def _handle_unreadable(self, skipped: list[str], split: str) -> None:
        """Fail naming the first unreadable file, or count and log them (on_corrupt="skip")."""
        if not skipped:
            return
        if self.on_corrupt == "fail":
            # Every file with its reason (up to a limit), so one run finds them all.
            limit = 20
            listed = "; ".join(skipped[:limit])
            more = f" (+{len(skipped) - limit} more not listed)" if len(skipped) > limit else ""
            what = f"image {listed}" if len(skipped) == 1 else f"{len(skipped)} images: {listed}"
            raise ValueError(
                f"Cannot read {what}{more}. Fix or remove the files, or set "
                "data.on_corrupt=skip to leave unreadable images out."
            )
        self.skipped += skipped
        log.warning(
            "Skipped %d unreadable image(s) in %s; first: %s",
            len(skipped),
            self.root / split,
            skipped[0],
        )

    # -- input pipeline: crops of the cached squares -------------------------------------------
    @property
    def resize_size(self) -> int | None:  # predict/serve: Resize(this) + CenterCrop
        return self.decode_size if self.decode_size != self.image_size else None

    def eval_transform(self):
        if self._eval_transform is not None or self.decode_size == self.image_size:
            return super().eval_transform()
        return T.Compose([T.CenterCrop(self.image_size)] + self._to_normalized_tensor())
