"""``WallClock``: log the wall time since fit started at every validation, so accuracy can be
plotted against time (time-to-accuracy), not only against epochs. ``time/cpu_s`` is this
process's CPU time since fit start (all threads): on a shared machine it varies less than wall
time."""

from __future__ import annotations

import time

import pytorch_lightning as pl


class WallClock(pl.Callback):
    def __init__(self) -> None:
        self._start: float | None = None
        self._offset = 0.0  # time already spent before a resume
        self._cpu_start = 0.0

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = time.perf_counter()
        self._cpu_start = time.process_time()

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._start is None or trainer.sanity_checking:
            return
        pl_module.log("time/elapsed_s", self.elapsed(), on_epoch=True)
        pl_module.log("time/cpu_s", time.process_time() - self._cpu_start, on_epoch=True)

    def elapsed(self) -> float:
        return self._offset + (time.perf_counter() - self._start if self._start else 0.0)

    def state_dict(self) -> dict:
        return {"elapsed_s": self.elapsed()}

    def load_state_dict(self, state_dict: dict) -> None:
        self._offset = float(state_dict.get("elapsed_s", 0.0))
