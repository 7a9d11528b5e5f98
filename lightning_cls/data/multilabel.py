"""``MultiLabelDataModule``: images with any number of labels each, listed in an index file.

A folder-per-class layout cannot say that a photo shows both a cat and a dog, so the labels
come from one index per split beside the images, ``root/train.csv`` (required) and optionally
``root/val.csv`` and ``root/test.csv`` (without them, test then val are held out of train with
fixed seeds, as for ImageFolder). CSV rows are ``file,labels`` with the labels joined by
``;`` (an optional ``file,labels`` header, after which further columns are ignored, so the CSV
``predict`` writes for a multi-label model reads back as an index; an empty labels field is an
image with no label)::

    file,labels
    photos/0001.jpg,cat;dog
    photos/0002.jpg,dog
    photos/0003.jpg,

``root/<split>.json`` works too: ``[{"file": "photos/0001.jpg", "labels": ["cat", "dog"]}]``
or ``{"photos/0001.jpg": ["cat", "dog"]}``. Paths are relative to ``root``. Labels become
(N, K) multi-hot float rows; the images are decoded and cached exactly as ImageFolder's
(``ImageFolderDataModule``, whose options all apply). Train with ``task=multilabel``.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from lightning_cls.data.fingerprint import DataIndex
from lightning_cls.data.imagefolder import ImageFolderDataModule
from lightning_cls.data.memory import hold_out
from lightning_cls.data.registry import register_dataset
from lightning_cls.inference.spec import Split

log = logging.getLogger(__name__)

INDEX_SUFFIXES = (".csv", ".json")
SEPARATOR = ";"
INDEX_HELP = (
    "one row per image, file,labels with the labels joined by ';' (e.g. photos/0001.jpg,cat;dog), "
    "paths relative to data.root"
)


def read_index(path: Path) -> list[tuple[str, list[str], str]]:
    """An index file -> ``[(file, labels, where)]``; ``where`` is ``path:line`` (CSV) or
    ``path[entry]`` (JSON), for error messages."""
    if path.suffix == ".json":
        return _read_json(path)
    rows = []
    width = 2  # fields per row; a header "file,labels[,more...]" allows more (ignored)
    error = None  # predict's CSV: the column saying a file could not be read (row skipped)
    with path.open(newline="", encoding="utf-8-sig") as fh:  # -sig: Excel's "CSV UTF-8" BOM
        for line, row in enumerate(csv.reader(fh), start=1):
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if line == 1 and [c.strip().lower() for c in row[:2]] == ["file", "labels"]:
                width = len(row)  # e.g. predict's CSV: file,labels,prob_<label>...,error
                names = [c.strip().lower() for c in row]
                error = names.index("error") if "error" in names else None
                continue
            if error is not None and len(row) > error and row[error].strip():
                continue  # a file predict could not read: no labels to learn from
            if len(row) > width:
                raise ValueError(
                    f"{path}:{line} has {len(row)} fields {row}; write {INDEX_HELP}, or quote a "
                    "file name that contains a comma."
                )
            labels = row[1] if len(row) >= 2 else ""
            rows.append((row[0].strip(), _split_labels(labels), f"{path}:{line}"))
    return rows


def _split_labels(text: str) -> list[str]:
    return [name.strip() for name in text.split(SEPARATOR) if name.strip()]


def _read_json(path: Path) -> list[tuple[str, list[str], str]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}).") from None
    entries = (
        [{"file": f, "labels": labels} for f, labels in data.items()]
        if isinstance(data, dict)
        else data
    )
    if not isinstance(entries, list):
        raise ValueError(
            f"{path} holds a {type(data).__name__}; write a list of "
            '{"file": ..., "labels": [...]} objects or a {file: [labels]} object.'
        )
    rows = []
    for i, entry in enumerate(entries):
        where = f"{path}[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
            raise ValueError(
                f'{where} is {entry!r}; each entry needs "file" (a path) and "labels" (a list).'
            )
        labels = entry.get("labels") or []
        if isinstance(labels, str):
            labels = _split_labels(labels)
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise ValueError(f'{where}: "labels" must be a list of label names, got {labels!r}.')
        rows.append((entry["file"], [x.strip() for x in labels if x.strip()], where))
    return rows


@register_dataset("multilabel")
class MultiLabelDataModule(ImageFolderDataModule):
    task = "multilabel"
    class_source = "labels"

    def __init__(self, root: str, classes: Sequence[str] | None = None, **kwargs):
        """``root`` holds ``train.csv`` or ``train.json`` (+ optional val/test indexes) and the
        images they list. ``classes``: the label names in their output order (default: every
        label of the train index, sorted); an index label outside them is an error. Other
        keyword arguments are ``ImageFolderDataModule``'s (image_size, decode_size, cache,
        on_corrupt, val_size, test_size, ...) and ``ImageDataModule``'s."""
        for key, off in (("folds", "null"), ("balanced_sampler", "false")):
            if kwargs.get(key):
                raise ValueError(
                    f"data.{key}={kwargs[key]} is not supported with data=multilabel: it "
                    f"stratifies or samples by one class per image, and these images have "
                    f"several; set data.{key}={off}."
                )
        super().__init__(root, **kwargs)
        if classes is not None:
            classes = [str(c) for c in classes]
            if len(set(classes)) != len(classes) or not classes:
                raise ValueError(
                    f"data.classes={classes} must be a non-empty list of distinct label names; "
                    "fix the list, or set data.classes=null to take the train index's labels."
                )
        self._classes, self._classes_given = classes, classes is not None

    def index_path(self, split: str) -> Path | None:
        """``root/<split>.csv`` or ``.json``; None when the split has none (train: an error)."""
        if not self.root.is_dir():
            raise FileNotFoundError(
                f"Multi-label root {self.root} does not exist; set data.root to the folder "
                "holding train.csv (or train.json) and the images it lists."
            )
        found = [self.root / f"{split}{s}" for s in INDEX_SUFFIXES]
        found = [p for p in found if p.is_file()]
        if len(found) > 1:
            raise ValueError(f"{self.root} has both {found[0].name} and {found[1].name}; keep one.")
        if not found and split == "train":
            raise FileNotFoundError(
                f"{self.root} has no train.csv or train.json; write {INDEX_HELP}."
            )
        return found[0] if found else None

    @property
    def train_dir(self) -> Path:  # what ImageFolder's checks name: here the train index
        return self.index_path("train")

    @property
    def classes(self) -> list[str]:
        if self._classes is None:
            rows = read_index(self.index_path("train"))
            self._classes = sorted({name for _, labels, _ in rows for name in labels})
            if not self._classes:
                raise ValueError(
                    f"{self.index_path('train')} lists no labels at all; write {INDEX_HELP}."
                )
        return self._classes

    def data_index(self) -> DataIndex:
        """The index files (they hold the labels) and every image they list (a missing one
        is left to ``_load``'s error, which names its row)."""
        files = []
        for split in ("train", "val", "test"):
            if (index := self.index_path(split)) is not None:
                listed = [self.root / file for file, _, _ in read_index(index)]
                files += [str(index)] + [str(f) for f in listed if f.is_file()]
        return DataIndex(self.root, files, self._cache_dir())

    def prepare_data(self) -> None:
        if self.cache:
            for name in ("train", "val", "test"):
                if self.index_path(name) is not None:
                    self._load(name)

    def load_splits(self) -> dict[str, Split]:
        splits = {
            name: self._load(name)
            for name in ("train", "val", "test")
            if self.index_path(name) is not None
        }
        if "test" not in splits:
            log.info(
                "%s has no test index: holding out %s of train as test.", self.root, self.test_size
            )
            hint = f", or add {self.root / 'test.csv'}"
            splits["train"], splits["test"] = hold_out(
                splits["train"], self.test_size, self.split_seed, "test", hint
            )
        return splits

    def _load(self, split: str) -> Split:
        index = self.index_path(split)
        rows = read_index(index)
        if not rows:
            raise ValueError(f"{index} lists no images; write {INDEX_HELP}.")
        position = {name: i for i, name in enumerate(self.classes)}
        files, labels = [], []
        for file, names, where in rows:
            path = self.root / file
            if not path.is_file():
                raise FileNotFoundError(
                    f"{where}: image {file} not found at {path} (paths are relative to "
                    "data.root); fix the row or add the file."
                )
            unknown = [n for n in names if n not in position]
            if unknown:
                source = (
                    "data.classes" if self._classes_given else f"the labels of {self.train_dir}"
                )
                raise ValueError(
                    f"{where}: label(s) {unknown} of {file} are not in {source} "
                    f"({', '.join(self.classes)}); fix the row or add them there."
                )
            files.append(str(path))
            labels.append(sorted({position[n] for n in names}))
        images, labels = self._decode_cached(split, files, labels, cache_tag="-multilabel")
        hot = torch.zeros(len(labels), self.num_classes, dtype=torch.float32)
        for row, present in enumerate(labels):
            hot[row, present] = 1.0
        return Split(torch.from_numpy(images), hot)


def write_color_squares(
    root: str | Path,
    sizes: dict[str, int] | None = None,
    image_size: int = 32,
    seed: int = 0,
    prob: float = 0.4,
) -> Path:
    """A learnable multi-label dataset on disk: PNGs of noise with a square of each present
    colour (``red``, ``green``, ``blue``, ``yellow``, each present with probability ``prob``),
    and ``<split>.csv`` indexes; ``sizes`` maps split -> image count (default train 400, val
    100, test 100). For tests and the docs; returns ``root``."""
    root = Path(root)
    sizes = sizes or {"train": 400, "val": 100, "test": 100}
    colours = {
        "red": (220, 30, 30),
        "green": (30, 200, 30),
        "blue": (30, 30, 220),
        "yellow": (230, 220, 20),
    }
    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    side = max(4, image_size // 4)
    for split, n in sizes.items():
        lines = ["file,labels"]
        for i in range(n):
            img = rng.integers(60, 140, (image_size, image_size, 3), dtype=np.uint8)
            present = [name for name in colours if rng.random() < prob]
            for name in present:
                y, x = rng.integers(0, image_size - side, 2)
                img[y : y + side, x : x + side] = colours[name]
            file = f"images/{split}_{i:04d}.png"
            Image.fromarray(img).save(root / file)
            lines.append(f"{file},{SEPARATOR.join(present)}")
        (root / f"{split}.csv").write_text("\n".join(lines) + "\n")
    return root
