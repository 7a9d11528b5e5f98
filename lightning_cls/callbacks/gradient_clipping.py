"""``GradientClipping``: clip gradients in ``on_before_optimizer_step``, by norm, by value, or
adaptively to a multiple of the running median norm.

Where it runs. Lightning calls ``on_before_optimizer_step`` once per optimizer step: after the
last backward of an accumulation window (so the *accumulated* gradient is clipped, once) and,
under AMP, after the grad scaler's ``unscale_`` (so the bound is in true gradient units, not
scaled by the loss scale). Lightning's own ``trainer.gradient_clip_val`` clips right after
this hook; both can be set, the tighter bound wins.

Adaptive mode. A fixed ``max_norm`` has to be guessed per model, loss and batch size. The
adaptive mode keeps the last ``window`` pre-clipping norms and clips to ``factor`` times their
median: typical steps pass untouched, a spike (a bad batch, a loss blow-up) is cut to a few
times the usual size. The median ignores the spikes themselves, which a mean would not. Until
``min_history`` norms are seen it clips to ``max_norm`` if one is given.

Logged each step: ``train/grad_norm_before_clip`` and ``train/grad_norm_after_clip``. The
adaptive mode reads each norm on the host (one device sync per step). Under sharded strategies
(FSDP, DeepSpeed) each rank holds a shard of the gradients, so the norm here is the shard's:
use ``trainer.gradient_clip_val`` there, which the strategy computes across shards.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_warn

MODES = ("norm", "value", "adaptive")


class GradientClipping(pl.Callback):
    """Clip the gradients of every optimizer before it steps.

    Args:
        mode: ``"norm"`` (rescale so the total norm is at most ``max_norm``), ``"value"`` (clamp
            each element to ``[-clip_value, clip_value]``) or ``"adaptive"`` (norm clipping to
            ``factor`` × the median of the last ``window`` norms).
        max_norm: the bound of ``"norm"``; in ``"adaptive"``, the bound used until
            ``min_history`` norms are known (None: no clipping until then).
        clip_value: the bound of ``"value"``.
        factor: in ``"adaptive"``, the bound as a multiple of the median recent norm.
        window: in ``"adaptive"``, how many recent norms the median is taken over.
        min_history: in ``"adaptive"``, the number of norms needed before the bound applies.
        norm_type: the norm (2.0 = L2; ``inf`` = max absolute value).
    """

    def __init__(
        self,
        mode: str = "norm",
        max_norm: float | None = 1.0,
        clip_value: float | None = None,
        factor: float = 3.0,
        window: int = 100,
        min_history: int = 10,
        norm_type: float = 2.0,
    ):
        if mode not in MODES:
            raise ValueError(f"Unknown clipping mode {mode!r}; use one of {', '.join(MODES)}.")
        if mode == "norm" and not (max_norm and max_norm > 0):
            raise ValueError(f"mode='norm' needs max_norm > 0 (e.g. 1.0), got {max_norm}.")
        if mode == "value" and not (clip_value and clip_value > 0):
            raise ValueError(f"mode='value' needs clip_value > 0 (e.g. 0.5), got {clip_value}.")
        if mode == "adaptive" and not (factor > 1 and window >= 1 and 1 <= min_history <= window):
            raise ValueError(
                f"mode='adaptive' needs factor > 1, window >= 1 and 1 <= min_history <= window; "
                f"got factor={factor}, window={window}, min_history={min_history}."
            )
        self.mode, self.max_norm, self.clip_value = mode, max_norm, clip_value
        self.factor, self.min_history, self.norm_type = factor, min_history, float(norm_type)
        self.history: deque[float] = deque(maxlen=window)

    def bound(self) -> float | None:
        """The norm bound of the next step (None: no norm clipping)."""
        if self.mode == "adaptive" and len(self.history) >= self.min_history:
            return self.factor * statistics.median(self.history)
        return self.max_norm if self.mode != "value" else None

    def on_before_optimizer_step(self, trainer, pl_module: pl.LightningModule, optimizer) -> None:
        groups = optimizer.param_groups
        params = [p for group in groups for p in group["params"] if p.grad is not None]
        if not params:
            return
        before = torch.nn.utils.get_total_norm([p.grad for p in params], self.norm_type)
        if self.mode == "value":
            torch.nn.utils.clip_grad_value_(params, self.clip_value)
        else:
            bound = self.bound()
            if bound is not None:
                torch.nn.utils.clip_grad_norm_(params, bound, self.norm_type)
        after = torch.nn.utils.get_total_norm([p.grad for p in params], self.norm_type)
        if self.mode == "adaptive" and math.isfinite(float(before)):
            self.history.append(float(before))  # unclipped: the median tracks the true scale
        norms = {"train/grad_norm_before_clip": before, "train/grad_norm_after_clip": after}
        pl_module.log_dict(norms, on_step=True, on_epoch=False)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.gradient_clip_val:
            rank_zero_warn(
                f"GradientClipping(mode={self.mode!r}) and trainer.gradient_clip_val="
                f"{trainer.gradient_clip_val} both clip; Lightning's runs second, so the tighter "
                "bound wins. Unset one of them."
            )

    def state_dict(self) -> dict:
        return {"history": list(self.history)}

    def load_state_dict(self, state_dict: dict) -> None:
        self.history.clear()
        self.history.extend(state_dict.get("history", []))
