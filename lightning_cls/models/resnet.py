"""torchvision ResNet-18 with the CIFAR stem: 3x3 stride-1 first conv and no max-pool."""

from __future__ import annotations

import torch
import torchvision
from torch import nn

from lightning_cls.models.registry import register_model


@register_model("resnet18")
def resnet18(
    in_channels: int = 3,
    num_classes: int = 10,
    image_size: int = 32,  # accepted for a uniform signature; the net is size-agnostic
    checkpoint_activations: bool = False,
) -> nn.Module:
    net = torchvision.models.resnet18(weights=None, num_classes=num_classes)
    # Small 32x32 inputs would shrink to 1x1 after the ImageNet stem (7x7/2 conv + max-pool).
    net.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    net.maxpool = nn.Identity()
    if checkpoint_activations:
        _checkpoint_stages(net)
    return net


def _checkpoint_stages(net: nn.Module) -> None:
    """Recompute each residual stage in the backward pass instead of storing its activations.

    Only ``forward`` is wrapped, so state_dict keys stay those of the plain ResNet.
    """
    from torch.utils.checkpoint import checkpoint

    for name in ("layer1", "layer2", "layer3", "layer4"):
        stage = getattr(net, name)

        def forward(x, _stage=stage, _plain=stage.forward):
            if _stage.training and torch.is_grad_enabled():
                return checkpoint(_plain, x, use_reentrant=False)
            return _plain(x)

        stage.forward = forward
