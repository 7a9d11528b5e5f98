"""Per-channel statistics of uint8 image tensors."""

from __future__ import annotations

import torch


def channel_stats(images: torch.Tensor, chunk: int = 4096) -> tuple[list[float], list[float]]:
    """Mean and std per channel of (N, C, H, W) uint8 images, scaled to [0, 1].

    Accumulates in float64 over chunks, so 50,000 CIFAR images need no big float copy.
    """
    if images.ndim != 4:
        raise ValueError(f"Expected images of shape (N, C, H, W), got {tuple(images.shape)}.")
    total = torch.zeros(images.shape[1], dtype=torch.float64)
    total_sq = torch.zeros_like(total)
    for start in range(0, len(images), chunk):
        x = images[start : start + chunk].to(torch.float64) / 255.0  # (n, C, H, W)
        total += x.sum(dim=(0, 2, 3))
        total_sq += (x * x).sum(dim=(0, 2, 3))
    count = images.shape[0] * images.shape[2] * images.shape[3]
    mean = total / count
    std = (total_sq / count - mean * mean).clamp_min(0).sqrt()
    return mean.tolist(), std.tolist()
