"""A tiny SimpleCNN trained for a few seconds on synthetic data, shared by the export tests."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from lightning_cls.data import SyntheticDataModule
from lightning_cls.export.meta import ModelMeta
from lightning_cls.module import ClassificationModule


def make_data(**kwargs) -> SyntheticDataModule:
    options = dict(
        num_classes=4,
        num_channels=3,
        image_size=16,
        train_size=384,
        test_size=64,
        batch_size=32,
        val_size=128,
        noise=0.8,
        seed=0,
    )
    options.update(kwargs)
    return SyntheticDataModule(**options)


def make_module(
    data: SyntheticDataModule, model_name: str = "simplecnn", **model_kwargs
) -> ClassificationModule:
    kwargs = dict(
        num_classes=data.num_classes, in_channels=data.num_channels, image_size=data.image_size
    )
    if model_name == "simplecnn":
        kwargs.update(widths=[8, 16], hidden=32)
    kwargs.update(model_kwargs)
    return ClassificationModule(
        model_name=model_name,
        model_kwargs=kwargs,
        optimizer=functools.partial(torch.optim.Adam, lr=3e-3),
        **data.meta,
    )


def fit(
    module: ClassificationModule, data: SyntheticDataModule, root: Path, **trainer_kwargs
) -> Path:
    """Train on CPU and save a checkpoint; return its path."""
    options = dict(
        default_root_dir=root,
        accelerator="cpu",
        devices=1,
        max_epochs=4,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
    )
    options.update(trainer_kwargs)
    trainer = pl.Trainer(**options)
    trainer.fit(module, datamodule=data)
    path = root / "model.ckpt"
    trainer.save_checkpoint(path)
    return path


@dataclass
class Trained:
    ckpt: Path
    module: ClassificationModule
    data: SyntheticDataModule
    meta: ModelMeta

    @property
    def net(self) -> torch.nn.Module:
        return self.module.net.eval()


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> Trained:
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    data = make_data()
    module = make_module(data)
    ckpt = fit(module, data, tmp_path_factory.mktemp("trained"))
    torch.set_num_threads(threads)
    return Trained(ckpt, module.eval(), data, ModelMeta.from_hparams(module.hparams))


REPO = Path(__file__).resolve().parents[2]


def compose_export(overrides: list[str], tmp: Path):
    """The config ``python -m lightning_cls.export <overrides>`` builds, outputs under ``tmp``."""
    from hydra import compose, initialize_config_dir

    from lightning_cls import config_dir

    base = [f"paths.root_dir={tmp}", f"paths.output_dir={tmp}/run"]
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose(config_name="export", overrides=base + overrides)


@pytest.fixture
def helpers():
    """Factories for tests that train their own tiny model or compose the export config."""
    from types import SimpleNamespace

    return SimpleNamespace(
        make_data=make_data, make_module=make_module, fit=fit, compose=compose_export, repo=REPO
    )
