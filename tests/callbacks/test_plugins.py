from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import pytorch_lightning as pl

from lightning_cls import callbacks, plugins
from lightning_cls.callbacks import NanGuard

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_callback_plugin"


def test_builtins_use_the_same_registry():
    assert isinstance(plugins.create_callback("nan_guard"), NanGuard)
    assert "synthetic" in plugins.list_datasets()
    with pytest.raises(ValueError, match=r"Unknown callback 'nan_gard'\. Did you mean 'nan_guard'\?"):
        plugins.create_callback("nan_gard")


def test_every_builtin_callback_is_registered():
    builtins = {getattr(callbacks, name) for name in callbacks.__all__}
    builtins = {c for c in builtins if isinstance(c, type) and issubclass(c, pl.Callback)}
    plugins.list_callbacks()  # registers the built-ins
    assert builtins <= set(plugins.CALLBACKS._factories.values())
    assert {"lr_finder", "wall_clock"} <= set(plugins.list_callbacks())


def test_duplicate_name_is_an_error():
    registry = plugins.PluginRegistry("lightning_cls.test_group", "callback")
    registry.register("a")(dict)
    with pytest.raises(ValueError, match="'a' is already registered"):
        registry.register("a")(list)


def test_installed_example_plugin_is_found_by_name_and_trains(tmp_path, monkeypatch, tiny_data, tiny_module, tiny_trainer):
    target, source = tmp_path / "site", tmp_path / "plugin_src"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--quiet",
         "--no-cache-dir", "-t", str(target), str(source)],
        check=True, capture_output=True, cwd=tmp_path,
    )  # fmt: skip
    monkeypatch.syspath_prepend(str(target))
    fresh = plugins.PluginRegistry("lightning_cls.callbacks", "callback")
    monkeypatch.setattr(plugins, "CALLBACKS", fresh)
    assert "epoch_timer" in plugins.list_callbacks()
    timer = plugins.create_callback("epoch_timer")
    data = tiny_data()
    trainer = tiny_trainer([timer], max_epochs=2, limit_val_batches=0)
    trainer.fit(tiny_module(data), datamodule=data)
    assert len(timer.durations) == 2 and "perf/epoch_seconds" in trainer.logged_metrics
