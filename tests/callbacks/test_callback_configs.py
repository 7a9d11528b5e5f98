"""conf/callbacks, conf/tuner and conf/debug compose as lightning-hydra-template's do.

``callbacks/default.yaml`` is a defaults list of one file per callback; add-ons are added to
it on the command line (``callbacks=[default,ema]``); the tuner has its own key; the ``debug``
group's presets change the trainer, and the ``debug=true`` flag still means full tracebacks.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from omegaconf.errors import InterpolationKeyError
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

from helpers.hydra_configs import QUIET_TRAINER, compose
from lightning_cls import cli, config_dir
from lightning_cls.train import train

CONF = Path(config_dir())
DEFAULTS = OmegaConf.load(CONF / "callbacks" / "default.yaml").defaults
ADD_ONS = sorted(
    p.stem
    for p in (CONF / "callbacks").glob("*.yaml")
    if p.stem not in {*DEFAULTS, "default", "none"}
)


def _keys(option: str) -> set[str]:
    """The callback keys a conf/callbacks file adds (through its own defaults list, too)."""
    cfg = OmegaConf.load(CONF / "callbacks" / f"{option}.yaml")
    keys = {k for k in cfg if k != "defaults"}
    for sub in cfg.get("defaults", []):
        keys |= _keys(sub) if sub != "_self_" else set()
    return keys


def test_default_is_a_defaults_list_of_one_file_per_callback(tmp_path):
    assert DEFAULTS[-1] == "_self_" and len(DEFAULTS) > 10
    for name in DEFAULTS[:-1]:
        cfg = OmegaConf.load(CONF / "callbacks" / f"{name}.yaml")
        assert list(cfg) == [name], f"callbacks/{name}.yaml must hold its one callback"
    cfg = compose(overrides=["callbacks=default"], tmp=tmp_path)
    assert list(cfg.callbacks) == DEFAULTS[:-1]  # in the list's order
    callbacks = [instantiate(c) for c in cfg.callbacks.values()]
    assert all(isinstance(c, pl.Callback) for c in callbacks)


def test_every_add_on_is_named():
    # The add-ons the docs promise (callbacks=[default,<name>]); a new file is listed here too.
    assert ADD_ONS == [
        "clip",
        "compile",
        "data_wait",
        "debug",
        "early_stopping",
        "ema",
        "grad_norm",
        "swa",
    ]


@pytest.mark.parametrize("option", ADD_ONS)
def test_add_ons_are_added_to_the_defaults(option, tmp_path):
    cfg = compose(overrides=[f"callbacks=[default,{option}]"], tmp=tmp_path)
    assert set(cfg.callbacks) == set(DEFAULTS[:-1]) | _keys(option)
    callbacks = {name: instantiate(c) for name, c in cfg.callbacks.items()}
    assert all(isinstance(c, pl.Callback) for c in callbacks.values())
    assert isinstance(callbacks["model_checkpoint"], ModelCheckpoint)


@pytest.mark.parametrize("option", [o for o in ADD_ONS if o != "early_stopping"])
def test_an_add_on_alone_replaces_the_defaults(option, tmp_path):
    cfg = compose(overrides=[f"callbacks=[{option}]"], tmp=tmp_path)
    assert set(cfg.callbacks) == _keys(option)


def test_add_ons_combine_and_none_has_no_callbacks(tmp_path):
    cfg = compose(overrides=["callbacks=[default,ema,clip,debug]"], tmp=tmp_path)
    assert {"ema", "gradient_clipping", "grad_norm", "data_wait"} <= set(cfg.callbacks)
    assert not compose(overrides=["callbacks=none"], tmp=tmp_path).callbacks
    # A recipe's own callbacks (conf/experiment) stay with an add-on.
    cfg = compose(overrides=["experiment=cifar10_fast", "callbacks=[default,ema]"], tmp=tmp_path)
    assert {"whitening", "lookahead", "ema", "model_checkpoint"} <= set(cfg.callbacks)


def test_early_stopping_follows_the_checkpoint_metric(tmp_path):
    cfg = compose(overrides=["callbacks=[default,early_stopping]"], tmp=tmp_path)
    stop = instantiate(cfg.callbacks.early_stopping)
    assert isinstance(stop, EarlyStopping)
    assert (stop.monitor, stop.mode) == ("val/acc", "max")
    cfg = compose(
        overrides=[
            "callbacks=[default,early_stopping]",
            "callbacks.model_checkpoint.monitor=val/loss",
            "callbacks.model_checkpoint.mode=min",
        ],
        tmp=tmp_path,
    )
    stop = instantiate(cfg.callbacks.early_stopping)
    assert (stop.monitor, stop.mode) == ("val/loss", "min")
    # Without the checkpoint there is no metric to follow: the error names the missing key.
    cfg = compose(overrides=["callbacks=[early_stopping]"], tmp=tmp_path)
    with pytest.raises(InterpolationKeyError, match=r"callbacks\.model_checkpoint\.monitor"):
        instantiate(cfg.callbacks.early_stopping)


def test_early_stopping_stops_a_run_whose_metric_stops_improving(tmp_path):
    # lr=0: val/acc stays where the first epoch left it, so after `patience` validations
    # without improvement the run stops, long before max_epochs.
    overrides = [
        *QUIET_TRAINER,
        "callbacks=[default,early_stopping]",
        "callbacks.early_stopping.patience=2",
        "~callbacks.plots",
        "optimizer.lr=0.0",
        "trainer.max_epochs=20",
        "test=false",
    ]
    summary = train(compose(overrides=overrides, tmp=tmp_path))
    ckpt = _load(tmp_path / "run" / "checkpoints" / "digits_simplecnn" / "last.ckpt")
    assert ckpt["epoch"] == 2  # epoch 0 set the best; epochs 1 and 2 did not beat it
    (state,) = [v for k, v in ckpt["callbacks"].items() if k.startswith("EarlyStopping")]
    assert state["wait_count"] == 2 and state["stopped_epoch"] == 2
    assert summary["best_val_acc"] == pytest.approx(float(state["best_score"]))


def _load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


@pytest.mark.parametrize(
    ("option", "key"), [("lr", "lr_finder"), ("batch_size", "batch_size_finder")]
)
def test_tuner_has_its_own_key(option, key, tmp_path):
    cfg = compose(overrides=[f"tuner={option}"], tmp=tmp_path)
    assert list(cfg.tuner) == [key]
    assert list(cfg.callbacks) == DEFAULTS[:-1]  # the tuner no longer writes into callbacks
    assert isinstance(instantiate(cfg.tuner[key]), pl.Callback)
    for path in (CONF / "tuner").glob("*.yaml"):
        assert "@package" not in path.read_text(), path


def test_tuner_callbacks_reach_the_trainer(tmp_path):
    overrides = [
        *QUIET_TRAINER,
        "tuner=lr",
        "tuner.lr_finder.num_training_steps=10",
        "trainer.max_epochs=1",
        "test=false",
    ]
    train(compose(overrides=overrides, tmp=tmp_path))
    assert (tmp_path / "run" / "lr_finder.png").read_bytes()[:4] == b"\x89PNG"


PRESETS = {
    "default": {"max_epochs": 1, "accelerator": "cpu", "devices": 1, "detect_anomaly": True},
    "fdr": {"fast_dev_run": True, "max_epochs": 1},
    "overfit": {"overfit_batches": 3, "max_epochs": 20},
    "limit": {"limit_train_batches": 5, "limit_val_batches": 2, "limit_test_batches": 2},
    "profiler": {"max_epochs": 1},
}


def test_every_debug_preset_is_tested():
    assert sorted(p.stem for p in (CONF / "debug").glob("*.yaml")) == sorted(PRESETS)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_debug_presets_compose_and_build_their_trainer(preset, tmp_path):
    cfg = compose(overrides=[f"debug={preset}", "experiment=cifar10_resnet18"], tmp=tmp_path)
    # The preset comes last in conf/train.yaml's defaults: it wins over an experiment.
    assert {k: cfg.trainer[k] for k in PRESETS[preset]} == PRESETS[preset]
    assert cfg.task_name == "debug" and cfg.data.num_workers == 0
    trainer = instantiate(cfg.trainer, logger=False, enable_progress_bar=False)
    assert isinstance(trainer, pl.Trainer)
    if preset == "profiler":
        assert type(trainer.profiler).__name__ == "SimpleProfiler"
    if preset == "overfit":
        assert trainer.overfit_batches == 3


def test_debug_limit_and_overfit_train_on_digits(tmp_path):
    quiet = [*QUIET_TRAINER, "~callbacks.plots", "prediction_mosaic=false", "data.batch_size=32"]
    summary = train(compose(overrides=[*quiet, "debug=limit"], tmp=tmp_path / "limit"))
    assert Path(summary["best_ckpt"]).is_file()
    ckpt = _load(tmp_path / "limit" / "run" / "checkpoints" / "digits_simplecnn" / "last.ckpt")
    assert ckpt["epoch"] == 2 and ckpt["global_step"] == 3 * 5  # 3 epochs of 5 batches
    # The same 3 batches every epoch (60 steps): a working model and loss learn them.
    overfit = [*quiet, "debug=overfit", "optimizer.lr=0.01"]
    train(compose(overrides=overfit, tmp=tmp_path / "overfit"))
    with open(tmp_path / "overfit" / "run" / "csv" / "metrics.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["train/loss_epoch"]]
    losses = [float(r["train/loss_epoch"]) for r in rows]
    accs = [float(r["train/acc"]) for r in rows]
    assert len(losses) == 20 and losses[-1] < 0.2 * losses[0] and accs[-1] >= 0.9, (losses, accs)


def test_debug_flag_is_stripped_and_the_debug_group_is_kept(monkeypatch):
    monkeypatch.delenv("LIGHTNING_CLS_FULL_ERROR", raising=False)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr(sys, "argv", ["lightning_cls.train", "debug=fdr", "debug=true"])
    seen = []

    def main():
        seen.append(list(sys.argv))
        raise ValueError("bad value")

    with pytest.raises(ValueError, match="bad value"):  # debug=true: the traceback, not a line
        cli.run_cli(main)
    assert seen == [["lightning_cls.train", "debug=fdr"]]


@pytest.mark.slow
def test_debug_fdr_runs_end_to_end_from_the_command_line(fork_server, fork_env, tmp_path):
    # The flag and the group together: fast_dev_run on the embedded digits, full tracebacks.
    # (``python -m`` forked from the session's pre-imported server: the command, not imports.)
    proc = fork_server.run(
        ["-m", "lightning_cls.train", "debug=fdr", "debug=true"],
        tmp_path,
        {**fork_env, "LIGHTNING_CLS_ROOT": str(tmp_path)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (results,) = (tmp_path / "outputs" / "debug").glob("*/*/results.json")
    summary = json.loads(results.read_text())
    assert summary["overrides"] == ["debug=fdr"]
    assert set(summary["test"]) >= {"test/acc", "test/loss"}  # one test batch ran
    assert summary["best_ckpt"] == ""  # fast_dev_run writes no checkpoint
