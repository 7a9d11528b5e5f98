"""scikit-learn's bundled 8x8 handwritten digits: 1,797 real images, 10 classes, no download."""

from __future__ import annotations

import numpy as np
import torch

from lightning_cls.data.base import ImageDataModule, as_split, check_channels
from lightning_cls.data.registry import register_dataset
from lightning_cls.inference.spec import Split

# Per-channel statistics of the training split (python -m lightning_cls.stats data=digits).
DIGITS_MEAN = (0.3057,)
DIGITS_STD = (0.3761,)


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
        from sklearn.datasets import load_digits

        digits = load_digits()
        # Pixel values are 0..16; scale to the 0..255 range every other dataset uses.
        images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)  # (N, 8, 8)
        full = as_split(images, digits.target)
        perm = torch.randperm(len(full), generator=torch.Generator().manual_seed(0))
        n_test = int(round(self.test_size * len(full)))
        return {"train": full.subset(perm[n_test:]), "test": full.subset(perm[:n_test])}
