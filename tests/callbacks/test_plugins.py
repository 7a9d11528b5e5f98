"""Callbacks by name: the built-ins and plug-in packages share one registry."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import pytorch_lightning as pl

from lightning_cls import callbacks
from lightning_cls.callbacks import NanGuard, registry

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_callback_plugin"


def test_builtins_use_the_same_registry():
    assert isinstance(registry.create_callback("nan_guard"), NanGuard)
    with pytest.raises(
        ValueError, match=r"Unknown callback 'nan_gard'\. Did you mean 'nan_guard'\?"
    ):
        registry.create_callback("nan_gard")


def test_every_builtin_callback_is_registered_under_its_module_name():
    builtins = {getattr(callbacks, name) for name in callbacks.__all__}
    builtins = {c for c in builtins if isinstance(c, type) and issubclass(c, pl.Callback)}
    names = registry.list_callbacks()
    assert {registry.CALLBACKS.get(n) for n in names} >= builtins
    assert {"lr_finder", "wall_clock", "nan_guard"} <= set(names)
    assert all(registry.CALLBACKS.get(c.__module__.rsplit(".", 1)[-1]) is c for c in builtins)


def test_installed_example_plugin_is_found_by_name_and_trains(
    tmp_path, monkeypatch, tiny_data, tiny_module, tiny_trainer
):
    target, source = tmp_path / "site", tmp_path / "plugin_src"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "--no-cache-dir",
            "-t",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    monkeypatch.syspath_prepend(str(target))
    # A registry that has not read the entry points yet, as in a fresh process.
    fresh = registry.Registry("callback", "lightning_cls.callbacks", returns=pl.Callback)
    monkeypatch.setattr(registry, "CALLBACKS", fresh)
    assert "epoch_timer" in registry.list_callbacks()
    timer = registry.create_callback("epoch_timer")
    data = tiny_data()
    trainer = tiny_trainer([timer], max_epochs=2, limit_val_batches=0)
    trainer.fit(tiny_module(data), datamodule=data)
    assert len(timer.durations) == 2 and "perf/epoch_seconds" in trainer.logged_metrics


@pytest.mark.parametrize(
    ("name", "kwargs", "cls_name"),
    [
        ("best_metric", {"monitor": "val/loss", "mode": "min"}, "BestMetric"),
        ("finetune", {"unfreeze_at_epoch": 2}, "BackboneFinetuning"),
        (
            "optuna_pruning",
            {"storage": "sqlite:///x.db", "study_name": "s", "trial_number": 0},
            "OptunaPruning",
        ),
    ],
)
def test_callbacks_outside_the_package_all_are_registered_too(name, kwargs, cls_name):
    callback = registry.create_callback(name, **kwargs)
    assert type(callback).__name__ == cls_name
    assert type(callback).__module__ == f"lightning_cls.callbacks.{name}"
    assert name in registry.list_callbacks()
