"""Issue 51's mutation pass over callbacks/preemption.py, in process (the subprocess tests of
tests/cluster/ are slow and marked cluster): a requeue signal mid-epoch saves at that batch's
end and leaves with 128 + the signal; one at an epoch's last batch waits for the next epoch's
first (a checkpoint there would resume without the epoch's validation); a SLURM array task
is requeued by its array id."""

from __future__ import annotations

import os
import signal

import pytest
import pytorch_lightning as pl
import torch

from helpers import make_data, make_module, make_trainer
from lightning_cls.callbacks.preemption import Preempted, Preemption, slurm_job


class SignalAtStep(pl.Callback):
    """Sends this process SIGUSR1 at the start of training step ``step`` (0-based)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGUSR1)


@pytest.fixture
def no_slurm(monkeypatch):
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(name, raising=False)
    previous = signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGUSR1, previous)


def _fit_until_preempted(tmp_path, step: int, epochs: int = 1) -> tuple[int, dict]:
    data = make_data()  # 3 steps an epoch
    preemption = Preemption(tmp_path / "ckpt")
    trainer = make_trainer(tmp_path, [preemption, SignalAtStep(step)], max_epochs=epochs)
    with pytest.raises(Preempted) as left:
        trainer.fit(make_module(data), datamodule=data)
    state = torch.load(tmp_path / "ckpt" / "last.ckpt", map_location="cpu", weights_only=True)
    return left.value.code, state


def test_a_requeue_signal_mid_epoch_saves_at_that_batch_end_and_exits_128_plus_it(
    tmp_path, no_slurm
):
    code, state = _fit_until_preempted(tmp_path, step=1)
    assert code == 128 + signal.SIGUSR1
    assert state["global_step"] == 2  # the end of the signalled batch, mid-epoch


def test_a_signal_at_an_epochs_last_batch_waits_for_the_next_epochs_first(tmp_path, no_slurm):
    code, state = _fit_until_preempted(tmp_path, step=2, epochs=2)
    assert code == 128 + signal.SIGUSR1
    assert state["global_step"] == 4 and state["epoch"] == 1  # not 3: epoch 0 validated


def test_a_slurm_array_task_is_requeued_by_its_array_id(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "5003")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "5000")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert slurm_job() == "5000_3"
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    assert slurm_job() == "5003"
    monkeypatch.delenv("SLURM_JOB_ID")
    assert slurm_job() is None
