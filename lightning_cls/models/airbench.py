"""An airbench-style CIFAR network (Keller Jordan's airbench94, after hlb-CIFAR10 and Page's
"How to train your ResNet"): a small stem, three conv groups (conv → maxpool → BN → GELU →
conv → BN → GELU), a global max-pool and a bias-free linear head whose logits are scaled
down (airbench's ``Mul(1/9)``), which trains fast with label smoothing and high learning rates.

``widths=(64, 256, 256)`` is airbench94's shape and what the CPU recipe
(``experiment=cifar10_fast``) uses; the default ``(48, 96, 192)`` (``model=airbench``) is a
narrower net for quick runs. ``whiten=True``
replaces the stem by airbench's frozen 2x2 whitening conv; ``init_whitening(images)`` with a few
thousand normalized training images sets it from the data's patch covariance (the
``WhiteningInit`` callback does this at fit start). ``dirac=True`` initialises each conv's first
``in_channels`` filters as identities (the block starts close to a pass-through);
``bn_weight=False`` freezes the BatchNorm scales at 1 and trains only their biases (airbench).
"""

from __future__ import annotations

import torch
from torch import nn

from lightning_cls.models.frozen import frozen_by_design
from lightning_cls.models.registry import register_model


def _bn(channels: int, momentum: float) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, momentum=momentum)


def _conv(cin: int, cout: int, dirac: bool) -> nn.Conv2d:
    conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
    if dirac:
        # Identity on the first min(cin, cout) filters, default init on the rest (airbench).
        with torch.no_grad():
            nn.init.dirac_(conv.weight[: min(cin, cout)])
    return conv


class ConvGroup(nn.Module):
    def __init__(
        self, cin: int, cout: int, bn_momentum: float, dirac: bool = False, bn_weight: bool = True
    ):
        super().__init__()
        self.conv1 = _conv(cin, cout, dirac)
        self.pool = nn.MaxPool2d(2)
        self.bn1 = _bn(cout, bn_momentum)
        self.conv2 = _conv(cout, cout, dirac)
        self.bn2 = _bn(cout, bn_momentum)
        self.act = nn.GELU()
        if not bn_weight:  # airbench: the scales stay at 1, only the biases train
            for bn in (self.bn1, self.bn2):
                frozen_by_design(bn.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, Cin, H, W) -> (B, Cout, H/2, W/2)
        x = self.act(self.bn1(self.pool(self.conv1(x))))
        return self.act(self.bn2(self.conv2(x)))


class AirbenchNet(nn.Module):
    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        image_size: int = 32,
        widths: tuple[int, int, int] = (48, 96, 192),
        stem_width: int = 24,
        whiten: bool = False,
        logit_scale: float = 1 / 9,
        bn_momentum: float = 0.4,
        dirac: bool = False,
        bn_weight: bool = True,
    ):
        super().__init__()
        # Three 2x2 max-pools need 8 pixels; the unpadded 2x2 whitening stem takes one more.
        min_size = 9 if whiten else 8
        if image_size < min_size:
            stem = "a 2x2 whitening stem, then " if whiten else ""
            raise ValueError(
                f"airbench needs image_size >= {min_size} ({stem}three 2x2 max-pools), got "
                f"image_size={image_size}; set data.image_size>={min_size} (resize the data)."
            )
        if len(widths) != 3:
            raise ValueError(f"airbench takes three block widths, got widths={list(widths)}.")
        if whiten:
            # 2x2 patches -> 2*C*4 channels (each eigenvector and its negative); frozen.
            stem_width = 2 * in_channels * 4
            self.stem = nn.Conv2d(in_channels, stem_width, 2, bias=True)
            frozen_by_design(self.stem.weight)
        else:
            self.stem = nn.Conv2d(in_channels, stem_width, 3, padding=1, bias=False)
        self.stem_act = nn.GELU()
        w1, w2, w3 = widths
        self.blocks = nn.Sequential(
            ConvGroup(stem_width, w1, bn_momentum, dirac, bn_weight),
            ConvGroup(w1, w2, bn_momentum, dirac, bn_weight),
            ConvGroup(w2, w3, bn_momentum, dirac, bn_weight),
        )
        self.pool = nn.AdaptiveMaxPool2d(1)
        self.head = nn.Linear(w3, num_classes, bias=False)
        self.logit_scale = logit_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, classes)
        x = self.stem_act(self.stem(x))  # (B, stem, H', W')
        x = self.blocks(x)  # (B, w3, H'/8, W'/8)
        x = torch.flatten(self.pool(x), 1)  # (B, w3)
        return self.head(x) * self.logit_scale

    @torch.no_grad()
    def init_whitening(self, images: torch.Tensor, eps: float = 5e-4) -> None:
        """Set the 2x2 stem to ZCA-like whitening filters of ``images`` (B, C, H, W) float."""
        if self.stem.kernel_size != (2, 2):
            raise ValueError("init_whitening needs the whitening stem; build with whiten=True.")
        c = images.shape[1]
        patches = images.float().unfold(2, 2, 1).unfold(3, 2, 1)  # (B, C, H-1, W-1, 2, 2)
        patches = patches.transpose(1, 3).reshape(-1, c * 4)  # (P, C*4)
        patches = patches - patches.mean(0)
        cov = patches.T @ patches / len(patches)  # (C*4, C*4)
        eigenvalues, eigenvectors = torch.linalg.eigh(cov)
        filters = (eigenvectors.T / torch.sqrt(eigenvalues + eps)[:, None]).view(-1, c, 2, 2)
        self.stem.weight.copy_(
            torch.cat([filters, -filters]).to(self.stem.weight)
        )  # (2*C*4, C, 2, 2)
        self.stem.bias.zero_()


@register_model("airbench")
def airbench(**kwargs) -> AirbenchNet:
    return AirbenchNet(**kwargs)
