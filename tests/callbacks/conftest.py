"""Tiny data, module and trainer factories shared by the callback tests (seconds on a CPU)."""

from __future__ import annotations

import functools

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_cls.data import SyntheticDataModule
from lightning_cls.module import ClassificationModule
from lightning_cls.training.checkpoint_io import AtomicCheckpointIO


def make_data(**kwargs) -> SyntheticDataModule:
    options = dict(
        num_classes=4,
        num_channels=1,
        image_size=8,
        train_size=64,
        test_size=32,
        batch_size=16,
        val_size=16,
        seed=0,
    )
    options.update(kwargs)
    return SyntheticDataModule(**options)


def make_module(data: SyntheticDataModule | None = None, **model_kwargs) -> ClassificationModule:
    data = data or make_data()
    kwargs = dict(
        num_classes=data.num_classes,
        in_channels=data.num_channels,
        image_size=data.image_size,
        widths=[4, 8],
        hidden=16,
    )
    kwargs.update(model_kwargs)
    return ClassificationModule(
        model_name="simplecnn",
        model_kwargs=kwargs,
        optimizer=functools.partial(torch.optim.SGD, lr=0.05, momentum=0.9),
        **data.spec,
    )


def make_trainer(tmp_path, callbacks=(), **kwargs) -> pl.Trainer:
    options = dict(
        default_root_dir=tmp_path,
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        plugins=[AtomicCheckpointIO()],
    )
    options["enable_checkpointing"] = any(isinstance(c, ModelCheckpoint) for c in callbacks)
    options.update(kwargs)
    return pl.Trainer(callbacks=list(callbacks), **options)


@pytest.fixture
def tiny_data():
    return make_data


@pytest.fixture
def tiny_module():
    return make_module


@pytest.fixture
def tiny_trainer(tmp_path):
    return functools.partial(make_trainer, tmp_path)
