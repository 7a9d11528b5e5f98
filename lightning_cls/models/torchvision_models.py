"""Any torchvision classification model by name, randomly initialized (no downloads)."""

from __future__ import annotations

import torchvision
from torch import nn


def build_torchvision_model(
    name: str,
    num_classes: int = 1000,
    in_channels: int = 3,
    image_size: int | None = None,  # torchvision models are size-agnostic (adaptive pooling)
    **kwargs,
) -> nn.Module:
    if in_channels != 3:
        raise ValueError(
            f"torchvision model '{name}' expects 3 input channels, got in_channels={in_channels}; "
            "use RGB data (data.num_channels=3)."
        )
    return torchvision.models.get_model(name, weights=None, num_classes=num_classes, **kwargs)
