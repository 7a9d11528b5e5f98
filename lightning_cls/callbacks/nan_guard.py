"""``NanGuard``: stop at the first non-finite loss or gradient, before it reaches the weights.

The check runs before the optimizer step (after AMP unscaling) and raises ``NonFiniteError``
there — so the poisoned update is never applied and no later checkpoint is written from it:
the last checkpoint on disk stays the last good one.

Cost: one device-to-host sync per optimizer step. The losses seen since the last step (one
per accumulated micro-batch) and every gradient are reduced on the device into one flag
(``torch._foreach_norm``: a non-finite value makes its norm non-finite), and only that flag is
read. The per-tensor scan that names the culprit runs only after the flag says something is
wrong. Under DDP the gradients are already all-reduced at that point, so every rank sees the
same flag and all ranks stop together (a loss check before backward would stop one rank and
leave the others waiting in the all-reduce).
"""

from __future__ import annotations

import logging
import os

import pytorch_lightning as pl
import torch

log = logging.getLogger(__name__)

_ADVICE = (
    "Common fixes: lower the learning rate (optimizer.lr), clip gradients "
    "(trainer.gradient_clip_val=1.0), use trainer.precision=32-true or bf16-mixed instead of "
    "16-mixed, and check the inputs for NaN/Inf. To find the operation that produced it, rerun "
    "with trainer.detect_anomaly=true (slow)."
)


class NonFiniteError(FloatingPointError):
    """Raised by ``NanGuard``; the message names the step and the first non-finite tensor."""


def first_non_finite(named: dict[str, torch.Tensor | None]) -> tuple[str, torch.Tensor] | None:
    """The first ``(name, tensor)`` holding a NaN or Inf, or None."""
    for name, tensor in named.items():
        if tensor is not None and not torch.isfinite(tensor).all():
            return name, tensor
    return None


def finite_flag(losses: list[torch.Tensor], grads: list[torch.Tensor]) -> bool:
    """True when every value in ``losses`` and ``grads`` is finite, with one host sync."""
    tensors = [t for t in (*losses, *grads) if t.numel()]
    if not tensors:
        return True
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for t in tensors:
        by_device.setdefault(t.device, []).append(t)
    norms = [torch.stack(torch._foreach_norm(ts)).float().sum() for ts in by_device.values()]
    first = norms[0].device
    return bool(torch.isfinite(torch.stack([n.to(first) for n in norms]).sum()))


def describe(tensor: torch.Tensor) -> str:
    nan, inf = int(torch.isnan(tensor).sum()), int(torch.isinf(tensor).sum())
    return f"shape {tuple(tensor.shape)}: {nan} NaN and {inf} Inf of {tensor.numel()} values"


def newest_checkpoint(trainer: pl.Trainer) -> str | None:
    """The most recently written of every checkpoint callback's last and best files."""
    paths = {
        path
        for ckpt in trainer.checkpoint_callbacks
        for path in (getattr(ckpt, "last_model_path", ""), getattr(ckpt, "best_model_path", ""))
        if path and os.path.isfile(path)
    }
    return max(paths, key=os.path.getmtime) if paths else None


class NanGuard(pl.Callback):
    """Raise ``NonFiniteError`` on a non-finite training loss or gradient.

    ``check_grads=False`` skips the per-step gradient scan (one ``isfinite`` per parameter).
    """

    def __init__(self, check_loss: bool = True, check_grads: bool = True):
        self.check_loss, self.check_grads = check_loss, check_grads
        self._losses: list[torch.Tensor] = []  # detached losses since the last optimizer step

    def on_before_backward(self, trainer, pl_module, loss: torch.Tensor) -> None:
        if self.check_loss:
            self._losses.append(loss.detach().float().reshape(-1))  # no sync here

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        losses, self._losses = self._losses, []
        grads = (
            [p.grad for p in pl_module.parameters() if p.grad is not None]
            if self.check_grads
            else []
        )
        if finite_flag(losses, grads):  # the step's one sync
            return
        loss = torch.cat(losses) if losses else torch.zeros(0)
        if not torch.isfinite(loss).all():
            self._stop(trainer, f"the training loss is {loss[~torch.isfinite(loss)][0].item()}")
        named = {name: p.grad for name, p in pl_module.named_parameters()}
        name, grad = first_non_finite(named)
        self._stop(trainer, f"the first non-finite gradient is {name} ({describe(grad)})")

    @staticmethod
    def _stop(trainer: pl.Trainer, what: str) -> None:
        where = (
            f"global step {trainer.global_step} (epoch {trainer.current_epoch}, "
            f"batch {trainer.fit_loop.epoch_loop.batch_idx})"
        )
        last = newest_checkpoint(trainer)
        kept = f" The last good checkpoint is {last}." if last else ""
        raise NonFiniteError(f"Training stopped at {where}: {what}.{kept} {_ADVICE}")
