"""The classic two-conv CNN of the PyTorch CIFAR-10 tutorial, parameterized.

No ``from __future__ import annotations`` here: torch.jit.script cannot resolve string
annotations on this module's methods, and `export=all` scripts the model.
"""

import torch
from torch import nn

from lightning_cls.models.registry import register_model


class SimpleCNN(nn.Module):
    """conv3x3 → ReLU → maxpool2, twice, then fc → ReLU → fc (widths 32/64, hidden 256)."""

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        image_size: int = 32,
        widths: tuple[int, int] = (32, 64),
        hidden: int = 256,
        dropout: float = 0.0,
        init: str = "default",
        checkpoint_activations: bool = False,
    ):
        super().__init__()
        if image_size % 4:
            raise ValueError(
                f"simplecnn needs image_size divisible by 4 (two 2x2 max-pools), got {image_size}; "
                "resize the data (data.image_size) to a multiple of 4."
            )
        if init not in ("default", "kaiming"):
            raise ValueError(f"Unknown init '{init}' for simplecnn; use 'default' or 'kaiming'.")
        c1, c2 = widths
        self.image_size = image_size
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(1),
            nn.Linear(c2 * (image_size // 4) ** 2, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
            nn.Linear(hidden, num_classes),
        )
        self.checkpoint_activations = checkpoint_activations
        if init == "kaiming":
            for m in self.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                    nn.init.zeros_(m.bias)

    @torch.jit.unused
    def _checkpointed_features(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.features, x, use_reentrant=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, classes)
        if self.checkpoint_activations and self.training and torch.is_grad_enabled():
            x = self._checkpointed_features(x)
        else:
            x = self.features(x)
        return self.classifier(x)


@register_model("simplecnn")
def simplecnn(**kwargs) -> SimpleCNN:
    return SimpleCNN(**kwargs)
