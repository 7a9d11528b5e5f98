"""A callback for the preemption tests: the process sends itself ``signal`` when training
reaches ``step`` (mid-epoch), as a scheduler would. Added on the command line with
``+callbacks.signal_at._target_=signal_at.SignalAt`` and this folder on PYTHONPATH."""

from __future__ import annotations

import os
import signal as signals

import pytorch_lightning as pl


class SignalAt(pl.Callback):
    def __init__(self, step: int, signal: str = "SIGUSR1", rank: int = 0):
        self.step, self.signum, self.rank = step, signals.Signals[signal], rank

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step and trainer.global_rank == self.rank:
            os.kill(os.getpid(), self.signum)
