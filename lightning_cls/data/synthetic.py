"""A learnable synthetic image task of any shape and size, generated offline from a seed.

Each class has a fixed random prototype image; samples are the prototype plus noise, so a
model can learn the task quickly, and accuracy well above chance proves that learning works.
"""

from __future__ import annotations

import torch

from lightning_cls.data.base import ImageDataModule, check_channels
from lightning_cls.data.registry import register_dataset
from lightning_cls.inference.spec import Split


@register_dataset("synthetic")
class SyntheticDataModule(ImageDataModule):
    def __init__(
        self,
        num_classes: int = 10,
        num_channels: int = 3,
        image_size: int = 32,
        train_size: int = 512,
        test_size: int = 128,
        noise: float = 0.5,
        data_seed: int = 0,
        mean=None,
        std=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}.")
        self.classes = [f"class_{i}" for i in range(num_classes)]
        self.num_channels, self.image_size = num_channels, image_size
        self.train_size, self.test_size = train_size, test_size
        self.noise, self.data_seed = noise, data_seed
        # Pixels are roughly uniform in [0, 1] around the prototypes: 0.5 / 0.25 fit well enough.
        self.mean = check_channels(
            (0.5,) * num_channels if mean is None else mean, num_channels, "data.mean"
        )
        self.std = check_channels(
            (0.25,) * num_channels if std is None else std, num_channels, "data.std"
        )

    def load_splits(self) -> dict[str, Split]:
        g = torch.Generator().manual_seed(self.data_seed)
        shape = (self.num_channels, self.image_size, self.image_size)
        prototypes = torch.rand((self.num_classes, *shape), generator=g)  # (K, C, H, W)

        def draw(n: int) -> Split:
            labels = torch.randint(0, self.num_classes, (n,), generator=g)
            noise = torch.randn((n, *shape), generator=g) * self.noise * 0.5
            images = (prototypes[labels] + noise).clamp(0, 1).mul(255).round().to(torch.uint8)
            return Split(images, labels)

        return {"train": draw(self.train_size), "test": draw(self.test_size)}
