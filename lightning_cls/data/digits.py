"""The 8x8 handwritten digits: 1,797 real images, 10 classes, no download.

``digits.npz`` beside this file holds scikit-learn's copy (``sklearn.datasets.load_digits()``:
the test set of the UCI "Optical Recognition of Handwritten Digits" data, CC BY 4.0), pixel
values 0..16 and labels as uint8. Reading it takes milliseconds; importing
``sklearn.datasets`` to get the same arrays took 0.5 s of every training process's start.
tests/data/test_datamodules.py checks the two are equal.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from lightning_cls.data.base import ImageDataModule, as_split, check_channels
from lightning_cls.data.registry import register_dataset
from lightning_cls.inference.spec import Split

# Per-channel statistics of the training split (python -m lightning_cls.stats data=digits).
DIGITS_MEAN = (0.3057,)
DIGITS_STD = (0.3761,)
DIGITS_FILE = Path(__file__).with_name("digits.npz")


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 8, 8) uint8 in 0..16, labels (1797,) uint8), as scikit-learn orders them."""
    with np.load(DIGITS_FILE) as data:
        return data["images"], data["labels"]


@register_dataset("digits")
class DigitsDataModule(ImageDataModule):
    """The embedded default dataset: a fixed 20% test split, 10% of the rest for validation."""

    classes = [str(d) for d in range(10)]
    num_channels = 1
    image_size = 8

    def __init__(self, test_size: float = 0.2, mean=None, std=None, **kwargs):
        """``mean``/``std``: per-channel normalization, ``None`` for the statistics above."""
        super().__init__(**kwargs)
        self.test_size = test_size
        self.mean = check_channels(DIGITS_MEAN if mean is None else mean, 1, "data.mean")
        self.std = check_channels(DIGITS_STD if std is None else std, 1, "data.std")

    def load_splits(self) -> dict[str, Split]:
        images, labels = load_digits_arrays()
        # Pixel values are 0..16; scale to the 0..255 range every other dataset uses.
        images = np.round(images * (255.0 / 16.0)).astype(np.uint8)  # (N, 8, 8)
        full = as_split(images, labels)
        perm = torch.randperm(len(full), generator=torch.Generator().manual_seed(0))
        n_test = int(round(self.test_size * len(full)))
        return {"train": full.subset(perm[n_test:]), "test": full.subset(perm[:n_test])}
