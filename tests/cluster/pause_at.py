"""A callback for the SLURM preemption test: at ``step`` every rank touches
``<folder>/paused.<rank>`` and waits (at most ``timeout`` s) until the Preemption callback has
recorded a signal, so that the test's ``scancel --signal=USR1`` lands mid-epoch. A resumed run
(the folder already holds the files) passes straight through."""

from __future__ import annotations

import time
from pathlib import Path

import pytorch_lightning as pl

from lightning_cls.callbacks.preemption import Preemption


class PauseAt(pl.Callback):
    def __init__(self, step: int, folder: str, timeout: float = 60.0):
        self.step, self.folder, self.timeout = step, Path(folder), timeout

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        mark = self.folder / f"paused.{trainer.global_rank}"
        if trainer.global_step != self.step or mark.exists():
            return
        mark.touch()
        preemption = next(c for c in trainer.callbacks if isinstance(c, Preemption))
        deadline = time.monotonic() + self.timeout
        while preemption.received is None and time.monotonic() < deadline:
            time.sleep(0.05)
