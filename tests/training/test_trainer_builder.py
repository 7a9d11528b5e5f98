"""``build_trainer``: the one place a command's Trainer gets its precision, its SLURM task count
and its loggers (train and eval alike)."""

from __future__ import annotations

import functools
import os

import pytest
import pytorch_lightning as pl
import torch

from lightning_cls.training import precision as P
from lightning_cls.training.loggers import CSVLogger
from lightning_cls.training.trainer import build_trainer


@pytest.fixture
def avx2_cpu(monkeypatch):
    """A CPU without native bf16 and no GPU: ``precision=auto`` means fp32 here."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(P, "_warned", set())


QUIET = functools.partial(
    pl.Trainer, accelerator="cpu", devices=1, enable_progress_bar=False, enable_model_summary=False
)


def test_auto_precision_is_resolved_and_no_logger_means_none(avx2_cpu, tmp_path):
    trainer = build_trainer(functools.partial(QUIET, default_root_dir=tmp_path), "auto", "cpu")
    assert trainer.precision == "32-true"  # not Lightning's error for an unknown "auto"
    assert trainer.loggers == []  # no default TensorBoard logger added behind the user's back


def test_callbacks_and_loggers_reach_the_trainer(avx2_cpu, tmp_path):
    logger = CSVLogger(save_dir=tmp_path, name="csv")
    marker = pl.Callback()
    trainer = build_trainer(QUIET, "32-true", "cpu", callbacks=[marker], loggers=[logger])
    assert trainer.loggers == [logger] and marker in trainer.callbacks


def test_a_slurm_step_s_task_count_is_filled_before_the_trainer_is_made(avx2_cpu, monkeypatch):
    for key, value in {
        "SLURM_NTASKS": "2",
        "SLURM_TASKS_PER_NODE": "2",
        "SLURM_JOB_NAME": "j",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURM_NTASKS_PER_NODE", raising=False)
    seen = {}

    def make(**kwargs):
        seen.update(kwargs, ntasks_per_node=os.environ.get("SLURM_NTASKS_PER_NODE"))
        return "trainer"

    assert build_trainer(make, "auto", "cpu") == "trainer"
    assert seen == {
        "precision": "32-true",
        "callbacks": [],
        "logger": False,
        "ntasks_per_node": "2",
    }
