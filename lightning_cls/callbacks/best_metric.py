"""``BestMetric``: the best value a validation metric reached during a run (the value a
sweeper optimizes), with the epoch it was reached in; and the latest validation epoch's metrics,
in its state, so each checkpoint carries its own (train.py reports the best checkpoint's)."""

from __future__ import annotations

import math

import pytorch_lightning as pl

MODES = ("max", "min")


class BestMetric(pl.Callback):
    """Track the best of ``monitor`` over the run's validation epochs (``mode`` max or min)."""

    def __init__(self, monitor: str = "val/acc", mode: str = "max"):
        if mode not in MODES:
            raise ValueError(f"mode={mode!r}; use one of {', '.join(MODES)} (optimized_mode).")
        self.monitor, self.mode = monitor, mode
        self.best: float | None = None
        self.best_epoch: int | None = None
        # val/* of the latest validation epoch. Lightning runs ModelCheckpoint's hooks after
        # every other callback's, so a checkpoint saved at an epoch holds that epoch's metrics.
        self.metrics: dict[str, float] = {}

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.metrics = {  # scalars only, as results.json's (per-class vectors are not)
            k: float(v)
            for k, v in trainer.callback_metrics.items()
            if k.startswith("val/") and getattr(v, "numel", lambda: 1)() == 1
        }
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            return
        value = float(value)
        better = self.best is None or (
            value > self.best if self.mode == "max" else value < self.best
        )
        if math.isfinite(value) and better:
            self.best, self.best_epoch = value, trainer.current_epoch

    def state_dict(self) -> dict:
        return {"best": self.best, "best_epoch": self.best_epoch, "metrics": self.metrics}

    def load_state_dict(self, state_dict: dict) -> None:
        self.best, self.best_epoch = state_dict["best"], state_dict["best_epoch"]
        self.metrics = dict(state_dict.get("metrics") or {})  # absent in older checkpoints
