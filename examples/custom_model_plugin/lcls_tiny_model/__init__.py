"""A tiny classifier shipped as a lightning_cls plug-in (see pyproject.toml's entry point)."""

from torch import nn


def build_tinynet(
    num_classes: int = 10, in_channels: int = 3, image_size: int = 32, width: int = 16
):
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1),  # (B, width, H, W)
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),  # (B, width, 1, 1)
        nn.Flatten(1),
        nn.Linear(width, num_classes),
    )
