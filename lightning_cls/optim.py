"""Learning-rate schedules, all stepped once per optimizer step (Lightning ``interval: step``).

Each takes the optimizer and ``total_steps`` (filled in by ``ClassificationModule`` from
``trainer.estimated_stepping_batches``), so configs can give them as ``_partial_: true``.
"""

from __future__ import annotations

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR, LRScheduler, OneCycleLR


def _with_warmup(shape, warmup_steps: int):
    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        return shape(step)

    return factor


def cosine(
    optimizer: Optimizer, total_steps: int, warmup_steps: int = 0, min_lr_ratio: float = 0.0
) -> LRScheduler:
    """Linear warm-up, then cosine decay to ``min_lr_ratio`` × the base learning rate."""

    def shape(step: int) -> float:
        span = max(1, total_steps - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / span)
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, _with_warmup(shape, warmup_steps))


def step(
    optimizer: Optimizer,
    total_steps: int,
    milestones: tuple[float, ...] = (0.5, 0.75),
    gamma: float = 0.1,
    warmup_steps: int = 0,
) -> LRScheduler:
    """Multiply the rate by ``gamma`` at each milestone, given as a fraction of training."""
    marks = [int(m * total_steps) for m in milestones]

    def shape(s: int) -> float:
        return gamma ** sum(s >= m for m in marks)

    return LambdaLR(optimizer, _with_warmup(shape, warmup_steps))


def one_cycle(
    optimizer: Optimizer, total_steps: int, max_lr: float | None = None, pct_start: float = 0.25
) -> LRScheduler:
    """Leslie Smith's one-cycle policy (``max_lr`` defaults to the optimizer's lr)."""
    peak = max_lr if max_lr is not None else [g["lr"] for g in optimizer.param_groups]
    return OneCycleLR(optimizer, max_lr=peak, total_steps=total_steps, pct_start=pct_start)
