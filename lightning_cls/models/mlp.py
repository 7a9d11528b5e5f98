"""TwoLayerNet: flatten → hidden → ReLU → classes, input size derived from the image shape."""

from __future__ import annotations

from torch import nn

from lightning_cls.models.registry import register_model


class TwoLayerNet(nn.Module):
    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        image_size: int = 32,
        hidden: int = 256,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(1),  # (B, C*H*W)
            nn.Linear(in_channels * image_size * image_size, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x):
        return self.net(x)


@register_model("mlp")
def mlp(**kwargs) -> TwoLayerNet:
    return TwoLayerNet(**kwargs)
