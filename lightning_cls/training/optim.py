"""Learning-rate schedules, all stepped once per optimizer step (Lightning ``interval: step``),
and parameter-group functions (per-group learning-rate / weight-decay scales).

Each takes the optimizer and ``total_steps`` (filled in by ``ClassificationModule`` from
``trainer.estimated_stepping_batches``), so configs can give them as ``_partial_: true``.
"""

from __future__ import annotations

import math

from torch import nn
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


def triangle(
    optimizer: Optimizer,
    total_steps: int,
    start: float = 0.2,
    peak_at: float = 0.23,
    end: float = 0.07,
) -> LRScheduler:
    """airbench's schedule: linear from ``start`` × lr up to lr at ``peak_at`` of training,
    then linear down to ``end`` × lr at the last step."""
    if not 0.0 < peak_at < 1.0:
        raise ValueError(f"triangle peak_at must be a fraction in (0, 1), got peak_at={peak_at}.")
    up = max(1, int(total_steps * peak_at))
    down = max(1, total_steps - up)

    def factor(s: int) -> float:
        if s < up:
            return start + (1.0 - start) * s / up
        return 1.0 + (end - 1.0) * min(1.0, (s - up) / down)

    return LambdaLR(optimizer, factor)


# -- parameter groups -------------------------------------------------------------------------
# A param-groups function takes the network and returns torch param-group dicts; besides any
# optimizer key, a group may carry ``lr_scale`` and ``weight_decay_scale``, which
# ``apply_group_scales`` multiplies into the optimizer's lr / weight_decay after it is built
# (the optimizer config keeps one base lr). ``ClassificationModule(param_groups=...)`` calls it.


def norm_bias_groups(
    net: nn.Module, lr_scale: float = 64.0, decay_per_step: bool = True
) -> list[dict]:
    """airbench's groups: BatchNorm parameters get ``lr_scale`` × the learning rate; with
    ``decay_per_step`` their weight decay is divided by it, so the decay each step applies
    (lr × weight_decay) stays that of the other parameters."""
    if lr_scale <= 0:
        raise ValueError(f"norm_bias_groups lr_scale must be > 0, got lr_scale={lr_scale}.")
    norm_types = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)
    norm_params = {
        id(p) for m in net.modules() if isinstance(m, norm_types) for p in m.parameters(False)
    }
    norm = [p for p in net.parameters() if id(p) in norm_params]
    other = [p for p in net.parameters() if id(p) not in norm_params]
    groups = [{"params": other}]
    if norm:
        wd_scale = 1.0 / lr_scale if decay_per_step else 1.0
        groups.append({"params": norm, "lr_scale": lr_scale, "weight_decay_scale": wd_scale})
    return groups


def apply_group_scales(optimizer: Optimizer) -> Optimizer:
    """Multiply each group's ``lr``/``weight_decay`` by its ``lr_scale``/``weight_decay_scale``
    (once: the scale keys are then set to 1, so calling it again changes nothing)."""
    for group in optimizer.param_groups:
        for key in ("lr", "weight_decay"):
            scale = group.get(f"{key}_scale", 1.0)
            if key in group and scale != 1.0:
                group[key] = group[key] * scale
                group[f"{key}_scale"] = 1.0
    return optimizer
