"""torchvision ResNet-18 with the CIFAR stem: 3x3 stride-1 first conv and no max-pool.

No ``from __future__ import annotations`` here: torch.jit.script cannot resolve string
annotations on this module's methods, and `export=all` scripts the model.
"""

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, ResNet

from lightning_cls.models.registry import register_model


class CifarResNet(ResNet):
    """torchvision's ResNet with the CIFAR stem; ``checkpoint_activations`` recomputes each
    residual stage in the backward pass instead of storing its activations.

    The checkpointing lives in ``forward`` (not in patched stage methods), so a ``deepcopy``
    (EMA, SWA) runs its own weights, and state_dict keys stay those of the plain ResNet.
    """

    def __init__(self, in_channels: int, num_classes: int, checkpoint_activations: bool):
        super().__init__(BasicBlock, [2, 2, 2, 2], num_classes=num_classes)
        # Small 32x32 inputs would shrink to 1x1 after the ImageNet stem (7x7/2 conv + max-pool).
        self.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
        self.maxpool = nn.Identity()
        self.checkpoint_activations = checkpoint_activations

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, classes)
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))  # (B, 64, H, W)
        if self.checkpoint_activations and self.training and torch.is_grad_enabled():
            x = self._checkpointed_stages(x)
        else:
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))  # (B, 512, H/8, W/8)
        return self.fc(torch.flatten(self.avgpool(x), 1))  # (B, classes)

    @torch.jit.unused  # TorchScript (export=torchscript) scripts the eval path only
    def _checkpointed_stages(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
            x = checkpoint(stage, x, use_reentrant=False)
        return x


@register_model("resnet18")
def resnet18(
    in_channels: int = 3,
    num_classes: int = 10,
    image_size: int = 32,  # accepted for a uniform signature; the net is size-agnostic
    checkpoint_activations: bool = False,
) -> nn.Module:
    return CifarResNet(in_channels, num_classes, checkpoint_activations)
