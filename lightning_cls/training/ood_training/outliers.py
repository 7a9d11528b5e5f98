"""Outlier exposure with outliers made from the training batch itself (Hendrycks et al. 2019,
"Deep Anomaly Detection with Outlier Exposure"; the outliers here need no download): part of
each training batch is cut into a ``grid`` x ``grid`` mosaic of tiles and the tiles are put back
in a random order, and the network is trained to be unsure on those images::

    loss = task loss + weight * cross-entropy(net(shuffle_tiles(x)), uniform)

A shuffled image keeps every colour and texture of a real training image but not the object's
shape, so confidence that textures alone earn is penalised, and the network has to rest its
confidence on the layout of a known object, which unknown classes that share the known ones'
textures lack. The outliers are made from the training images only: they share nothing with the
far-OOD generators of benchmarks/ood.py (noise, digits, shapes) the guide reports on.

Cost: the first ``share`` of each batch (the batch is already shuffled) goes through the network
once more, forward and backward: about ``1 + share`` times a step's compute. BatchNorm layers
normalise the outlier pass by its own statistics but fold none of them into their running
statistics (``running_stats_kept``). No parameters of its own: checkpoints and exports are
those of the plain network.
"""

from __future__ import annotations

import torch
from torch import nn

from lightning_cls.training.ood_training.base import (
    OODTraining,
    loss_weight,
    running_stats_kept,
    same_memory_format,
)


def shuffle_tiles(x: torch.Tensor, grid: int) -> torch.Tensor:
    """Each image of ``x`` (B, C, H, W) cut into ``grid`` x ``grid`` tiles of (H/grid, W/grid)
    and put back in a random order of its own (never the original order). Keeps ``x``'s
    channels_last; no host sync."""
    b, c, h, w = x.shape
    th, tw, n = h // grid, w // grid, grid * grid
    tiles = x.reshape(b, c, grid, th, grid, tw).permute(0, 2, 4, 1, 3, 5)  # (B, g, g, C, th, tw)
    tiles = tiles.reshape(b, n, c, th, tw)
    order = torch.rand(b, n, device=x.device).argsort(1)  # (B, n) a permutation per image
    kept = (order == torch.arange(n, device=x.device)).all(1, keepdim=True)  # (B, 1)
    order = torch.where(kept, order.roll(1, dims=1), order)  # the identity moved by one tile
    tiles = tiles.gather(1, order[:, :, None, None, None].expand(b, n, c, th, tw))
    out = tiles.reshape(b, grid, grid, c, th, tw).permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w)
    return same_memory_format(out, x)


class TileOutliers(OODTraining):
    """Outlier exposure on tile-shuffled training images (see the module doc). ``weight`` > 0:
    the outlier loss's share; ``grid`` >= 2: tiles per side; ``share`` in (0, 1]: the part of
    each batch made into outliers."""

    name = "outliers"

    def __init__(self, net: nn.Module, weight: float = 0.5, grid: int = 4, share: float = 0.5):
        super().__init__()
        self.weight = loss_weight(weight, "outlier exposure")
        if isinstance(grid, bool) or not isinstance(grid, int) or grid < 2:
            raise ValueError(
                f"ood_training.grid must be an integer >= 2 (tiles per side), got grid={grid!r}."
            )
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise ValueError(
                f"ood_training.share must be in (0, 1] (the part of each batch made into "
                f"outliers), got share={share!r}."
            )
        self.grid, self.share = grid, float(share)

    def loss(self, net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2:]
        if height % self.grid or width % self.grid:
            raise ValueError(
                f"ood_training=outliers cuts images into {self.grid}x{self.grid} tiles, and "
                f"{height}x{width} (H x W) does not divide by {self.grid}; set "
                "ood_training.grid to a divisor of both sides (e.g. 4 for 32x32 images)."
            )
        count = max(1, round(self.share * len(x)))
        with running_stats_kept(net):  # running statistics as the training images made them
            logits = net(shuffle_tiles(x[:count], self.grid)).float()  # (n, classes)
        # Cross-entropy to the uniform distribution over the classes: log C at its minimum.
        per_image = torch.logsumexp(logits, 1) - logits.mean(1)  # (n,)
        ce = per_image.mean()
        with torch.no_grad():  # train/outlier_loss (unweighted) and train/outlier_msp
            msp = logits.softmax(1).amax(1).sum()
        self.add(count, outlier_loss=per_image.sum(), outlier_msp=msp)
        return self.weight * ce
