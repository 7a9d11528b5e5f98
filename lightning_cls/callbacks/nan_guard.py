"""``NanGuard``: stop at the first non-finite loss or gradient, before it reaches the weights.

The check runs before the optimizer step (after AMP unscaling) and raises ``NonFiniteError``
there — so the poisoned update is never applied and no later checkpoint is written from it:
the last checkpoint on disk stays the last good one.

Cost: one device-to-host sync per optimizer step. The losses seen since the last step (one
per accumulated micro-batch) and every gradient are reduced on the device into one flag
(``torch._foreach_norm``: a non-finite value makes its norm non-finite), and only that flag is
read. The per-tensor scan that names the culprit runs only after the flag says something is
wrong; a flag raised by finite values alone (a norm that overflows float32, gradients above
~1e19) is cleared by that scan and training goes on. The module's parameter list is taken at
each training epoch's start, not per step (walking the module tree cost about a third of the
hook's 0.6 ms per SimpleCNN step; docs/benchmarks.md, issue 55): every parameter registered
by then is checked, every step. The check itself reads every gradient once (~0.4 ms for
SimpleCNN's 1.1 M on the 2-vCPU EPYC of docs/benchmarks.md). Under DDP the gradients are already all-reduced at that point, so every rank sees the
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
    first = tensors[0].device
    if all(t.device == first for t in tensors):  # one device: one foreach kernel, one read
        return bool(torch.isfinite(torch.stack(torch._foreach_norm(tensors)).float()).all())
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for t in tensors:
        by_device.setdefault(t.device, []).append(t)
    norms = [torch.stack(torch._foreach_norm(ts)).float() for ts in by_device.values()]
    return bool(torch.isfinite(torch.cat([n.to(first) for n in norms])).all())


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

    ``check_grads=False`` skips the per-step gradient check (one fused norm over every
    gradient).
    """

    def __init__(self, check_loss: bool = True, check_grads: bool = True):
        self.check_loss, self.check_grads = check_loss, check_grads
        self._losses: list[torch.Tensor] = []  # detached losses since the last optimizer step
        self._params: list[torch.nn.Parameter] | None = None  # the module's, per epoch

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._params = list(pl_module.parameters())

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self._params = None  # a later fit (another module) takes its own list

    def on_before_backward(self, trainer, pl_module, loss: torch.Tensor) -> None:
        if self.check_loss:
            self._losses.append(loss.detach().float().reshape(-1))  # no sync here

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        losses, self._losses = self._losses, []
        grads = []
        if self.check_grads:
            params = self._params if self._params is not None else pl_module.parameters()
            grads = [p.grad for p in params if p.grad is not None]
        if finite_flag(losses, grads):  # the step's one sync
            return
        loss = torch.cat(losses) if losses else torch.zeros(0)
        if not torch.isfinite(loss).all():
            self._stop(trainer, f"the training loss is {loss[~torch.isfinite(loss)][0].item()}")
        named = {name: p.grad for name, p in pl_module.named_parameters()}
        found = first_non_finite(named) if self.check_grads else None
        if found is None:  # finite values whose norm overflowed: nothing to stop for
            return
        name, grad = found
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
