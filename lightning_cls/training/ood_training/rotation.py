"""Rotation prediction (Hendrycks et al. 2019, "Using Self-Supervised Learning Can Improve
Model Robustness and Uncertainty"; OpenOOD v1.5's RotPred): a 4-way head on the network's
penultimate features learns how each training image was rotated (0, 90, 180 or 270 degrees)::

    loss = task loss + weight * cross-entropy(head(features(rot90(x, k))), k)

Telling orientations apart needs features of the object's shape, not only of the few textures
that separate the training classes, and those features also tell near-OOD images apart.

Each image gets its own k, drawn from torch's generator on the batch's device (seeded runs are
reproducible). The rotated batch goes through the same network, once more per step (about one
more forward and backward pass: roughly 2x the step's compute); a forward hook on the
network's last ``nn.Linear`` captures its input, the (B, D) penultimate features, and its output. OpenOOD's
RotPred trains on all four rotations of every image (4x the batch); one random rotation per
image keeps the cost at one extra pass.

Two things keep the extra pass from pulling the classifier off course:

- The rotation logits are scaled as the network scales its class logits after its last linear
  layer (airbench's ``logit_scale`` of 1/9; 1 for most networks), measured on each batch as the
  least-squares factor from that layer's output to the network's. Unscaled, the rotation
  head's gradient reaches the shared features 9x stronger than the classes' on
  ``cifar10_fast``: its training accuracy after the first epoch was 0.25 against 0.42 without
  the switch, 0.42 scaled (benchmarks/ood.py, 6 CIFAR-10 classes, seed 0).
- BatchNorm layers normalise the rotated batch by its own statistics (train mode) but do not
  fold them into their running statistics (their momentum is 0 for that pass), so evaluation
  normalises as for upright images.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lightning_cls.inference.network import _last_linear
from lightning_cls.training.ood_training.base import (
    OODTraining,
    loss_weight,
    running_stats_kept,
    same_memory_format,
)


def rotate_batch(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Image ``i`` of ``x`` (B, C, H, W), H == W, rotated by ``k[i]`` x 90 degrees over (H, W).

    All four rotations are stacked and gathered by ``k`` on the device: no host sync (a
    grouping by ``k`` with ``nonzero`` would wait on the GPU each step); the stack is four
    copies of the input batch, small beside the activations. Keeps ``x``'s channels_last."""
    rotations = torch.stack([torch.rot90(x, r, (2, 3)) for r in range(4)])  # (4, B, C, H, W)
    out = rotations[k, torch.arange(len(x), device=x.device)]  # (B, C, H, W)
    return same_memory_format(out, x)


class Rotation(OODTraining):
    """Rotation prediction on ``net``'s penultimate features (the input of its last
    ``nn.Linear``, D = its ``in_features``). ``weight`` > 0: the rotation loss's share."""

    name = "rotation"

    def __init__(self, net: nn.Module, weight: float = 0.5):
        super().__init__()
        self.weight = loss_weight(weight, "rotation prediction")
        try:
            self.linear_name, linear = _last_linear(net)
        except ValueError:
            raise ValueError(
                f"ood_training=rotation reads the penultimate features at the input of the "
                f"network's last nn.Linear, and {type(net).__name__} has none; use "
                "ood_training=none with this model."
            ) from None
        self.head = nn.Linear(linear.in_features, 4)  # (D,) -> 4 rotations

    def loss(self, net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2:]
        if height != width:
            raise ValueError(
                f"ood_training=rotation rotates images by 90 degrees, so they must be square; "
                f"these are {height}x{width} (H x W). Train with square images (data.image_size"
                "=<one number>) or with ood_training=none."
            )
        k = torch.randint(4, (len(x),), device=x.device)  # (B,) rotation of each image
        captured: list[tuple[torch.Tensor, torch.Tensor]] = []
        hook = net.get_submodule(self.linear_name).register_forward_hook(
            lambda module, args, out: captured.append((args[0], out))
        )
        try:
            with running_stats_kept(net):  # running statistics as the upright images made them
                out = net(rotate_batch(x, k))  # (B, classes)
        finally:
            hook.remove()
        features, linear_out = captured[-1]
        features = torch.flatten(features, 1)  # (B, D) penultimate features
        with torch.no_grad():  # the net's own scaling of its last linear layer's output
            linear_out, out = linear_out.float().flatten(), out.float().flatten()
            scale = (linear_out @ out) / (linear_out @ linear_out).clamp_min(1e-12)
        logits = self.head(features).float() * scale  # (B, 4)
        ce = F.cross_entropy(logits, k)
        hits = (logits.detach().argmax(1) == k).sum()
        # train/rotation_loss (unweighted) and train/rotation_acc, means over the epoch
        self.add(len(k), rotation_loss=ce * len(k), rotation_acc=hits)
        return self.weight * ce
