"""A callback for the SLURM preemption tests: at ``step`` every rank touches
``<folder>/paused.<rank>`` and waits (at most ``timeout`` s) until the Preemption callback has
recorded a signal (``signal``: that one), so that the test's ``scancel --signal=...`` lands
mid-epoch. A resumed run (the folder already holds the files) passes straight through. In a
sweep, ``job`` (the job's ``${hydra:job.num}``) and ``pause_job`` pick the one job that pauses."""

from __future__ import annotations

import signal as signals
import time
from pathlib import Path

import pytorch_lightning as pl

from lightning_cls.callbacks.preemption import Preemption


class PauseAt(pl.Callback):
    def __init__(
        self,
        step: int,
        folder: str,
        timeout: float = 60.0,
        job: int | None = None,
        pause_job: int | None = None,
        signal: str | None = None,
    ):
        self.step, self.folder, self.timeout = step, Path(folder), timeout
        self.paused = job == pause_job
        self.signum = None if signal is None else signals.Signals[signal]

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        mark = self.folder / f"paused.{trainer.global_rank}"
        if not self.paused or trainer.global_step != self.step or mark.exists():
            return
        mark.touch()
        preemption = next(c for c in trainer.callbacks if isinstance(c, Preemption))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline and (
            preemption.received is None or self.signum not in (None, preemption.received)
        ):
            time.sleep(0.05)
