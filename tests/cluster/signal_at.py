"""A callback for the preemption tests: the process sends itself ``signal`` at a moment of the
job, as a scheduler would. Added on the command line with
``+callbacks.signal_at._target_=signal_at.SignalAt`` and this folder on PYTHONPATH.

``moment``: ``train`` (the start of training step ``step``: mid-epoch), ``setup`` (the fit's
setup hook, before the first batch), ``val`` (validation batch ``batch`` of the fit's epoch
``step``), ``fit_end`` (the fit's last hooks: before calibration and export), ``test`` (test
batch ``batch``). With ``marker`` (a file path) the signal is sent once per job: a requeued job
that reaches the same moment again passes through. With ``plan`` (a JSON file of
``[moment, step, batch, rank]`` entries in job order) the signals of one job, one per attempt:
each attempt sends the first entry not yet marked done (``<plan>.<index>``) when it is reached."""

from __future__ import annotations

import json
import os
import signal as signals
from pathlib import Path

import pytorch_lightning as pl


class SignalAt(pl.Callback):
    def __init__(
        self,
        step: int = 0,
        signal: str = "SIGUSR1",
        rank: int = 0,
        moment: str = "train",
        batch: int = 0,
        marker: str | None = None,
        plan: str | None = None,
    ):
        self.step, self.signum, self.rank = step, signals.Signals[signal], rank
        self.moment, self.batch = moment, batch
        self.marker = Path(marker) if marker else None
        if plan is not None:  # the first entry this job has not sent yet
            entries = json.loads(Path(plan).read_text())
            done = [Path(f"{plan}.{i}").exists() for i in range(len(entries))]
            index = done.index(False) if False in done else None
            self.moment = "none" if index is None else entries[index][0]
            if index is not None:
                self.step, self.batch, self.rank = entries[index][1:]
                self.marker = Path(f"{plan}.{index}")

    def _send(self, trainer, moment: str, when: bool = True) -> None:
        if moment != self.moment or not when or trainer.global_rank != self.rank:
            return
        if self.marker is not None:
            if self.marker.exists():
                return
            self.marker.touch()
        os.kill(os.getpid(), self.signum)

    def setup(self, trainer, pl_module, stage) -> None:
        self._send(trainer, "setup", stage == "fit")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._send(trainer, "train", trainer.global_step == self.step)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        at = trainer.training or trainer.state.fn == "fit"
        self._send(
            trainer, "val", at and trainer.current_epoch == self.step and batch_idx == self.batch
        )

    def on_fit_end(self, trainer, pl_module) -> None:
        self._send(trainer, "fit_end")

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._send(trainer, "test", batch_idx == self.batch)
