"""A minimal lightning_cls callback plug-in: logs ``perf/epoch_seconds`` every epoch."""

from __future__ import annotations

import time

import pytorch_lightning as pl


class EpochTimer(pl.Callback):
    def __init__(self, metric: str = "perf/epoch_seconds"):
        self.metric = metric
        self.durations: list[float] = []
        self._start = 0.0

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.durations.append(time.perf_counter() - self._start)
        pl_module.log(self.metric, self.durations[-1])
