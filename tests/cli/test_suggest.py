"""A mistyped command line gets the closest key, option or override (cli/suggest.py, run_cli)."""

from __future__ import annotations

import sys

import pytest
from omegaconf import OmegaConf

from helpers.hydra_configs import compose
from lightning_cls import cli
from lightning_cls.cli import suggest
from lightning_cls.stats import main as stats_main
from lightning_cls.train import main as train_main


@pytest.fixture(scope="module")
def train_config() -> dict:
    return OmegaConf.to_container(compose("train"), resolve=False)


@pytest.mark.parametrize(
    "key, expected",
    [
        ("trainer.max_epoch", "unknown key trainer.max_epoch: did you mean trainer.max_epochs?"),
        ("augment.hflp", "unknown key augment.hflp: did you mean augment.hflip?"),
        ("max_epochs", "unknown key max_epochs: did you mean trainer.max_epochs?"),  # wrong level
        ("modle.name", "unknown key modle.name: did you mean model.name?"),  # the group misspelt
        ("optimizer.learning_rate", ""),  # nothing close: Hydra's own words
    ],
)
def test_an_unknown_key_gets_the_closest_key_of_the_config(train_config, key, expected):
    assert suggest.unknown_key(key, train_config, {}) == expected


def test_a_trainer_key_not_in_the_config_gets_the_trainers_argument_with_a_plus(train_config):
    accepted = {"trainer": suggest.keyword_arguments(train_config["trainer"]["_target_"])}
    assert suggest.unknown_key("trainer.limit_train_batch", train_config, accepted) == (
        "unknown key trainer.limit_train_batch: did you mean +trainer.limit_train_batches?"
    )


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--epochs", "3"], "unknown flag --epochs: settings are key=value; did you mean trainer.max_epochs=3?"),
        (["seed=1", "--lr=0.1"], "unknown flag --lr: settings are key=value; did you mean optimizer.lr=0.1?"),
        (["--batch-size", "32"], "unknown flag --batch-size: settings are key=value; did you mean data.batch_size=32?"),
        (["--model", "resnet18"], "unknown flag --model: settings are key=value; did you mean model=resnet18?"),
        (["--devices", "2"], "unknown flag --devices: settings are key=value; did you mean trainer.devices=2?"),
        (["--foo.bar=2"], "unknown flag --foo.bar: settings are key=value; did you mean foo.bar=2?"),
        (["--verbose"], "unknown flag --verbose: settings are key=value; did you mean verbose=true?"),
    ],
)  # fmt: skip
def test_an_argparse_flag_gets_its_override(train_config, args, expected):
    assert suggest.flag_hint(args, suggest.flat_keys(train_config)) == expected


def test_a_flag_this_command_lacks_gets_the_generic_form():
    assert suggest.flag_hint(["--epochs", "3"], ["data", "data.batch_size"]) == (
        "unknown flag --epochs: settings are key=value; did you mean epochs=3?"
    )


@pytest.mark.parametrize(
    "args", [["--cfg", "job"], ["-m", "seed=1,2"], ["--config-dir", "conf"], ["seed=-1"]]
)
def test_hydras_own_flags_are_no_typos(args):
    assert suggest.flag_hint(args) is None


def test_an_unknown_model_lists_the_options_and_the_torchvision_route():
    options = ["mlp", "resnet18", "simplecnn", "timm", "torchvision"]
    assert suggest.unknown_option("model", "resnet50", options) == (
        "no model config named resnet50; resnet50 is torchvision's: model=torchvision "
        "model.name=resnet50 or model=timm model.name=resnet50. The model configs: mlp, "
        "resnet18, simplecnn, timm, torchvision; your own: ./conf/model/<name>.yaml."
    )
    assert "did you mean model=resnet18?" in suggest.unknown_option("model", "resnet81", options)


def _run(main, argv: list[str], monkeypatch, capsys) -> str:
    """``python -m lightning_cls.<command> <argv>`` in-process: its stderr, after exit 1."""
    monkeypatch.setattr(sys, "argv", ["lightning_cls.cmd", *argv])
    with pytest.raises(SystemExit) as exit_info:
        cli.run_cli(main)
    assert exit_info.value.code == 1
    return capsys.readouterr().err


@pytest.mark.parametrize(
    "main, argv, expected",
    [
        (train_main, ["trainer.max_epoch=3"], "unknown key trainer.max_epoch: did you mean trainer.max_epochs?"),
        (train_main, ["--epochs", "3"], "unknown flag --epochs: settings are key=value; did you mean trainer.max_epochs=3?"),
        (stats_main, ["data.batchsize=8"], "unknown key data.batchsize: did you mean data.batch_size?"),
    ],
)  # fmt: skip
def test_a_command_answers_a_typo_with_the_closest_key_in_one_line(
    main, argv, expected, user_env, monkeypatch, capsys, tmp_path
):
    monkeypatch.chdir(tmp_path)
    assert _run(main, argv, monkeypatch, capsys) == f"error: {expected}\n"


def test_an_unknown_group_option_has_no_search_path(user_env, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    err = _run(train_main, ["model=resnet50"], monkeypatch, capsys)
    assert err.startswith("error: no model config named resnet50; ")
    assert "model=torchvision model.name=resnet50" in err
    assert "search path" not in err and "file://" not in err and err.count("\n") == 1


def test_following_hydras_plus_hint_gets_the_key_first_and_leaves_no_run_folder(
    user_env, monkeypatch, capsys, tmp_path
):
    """``+trainer.max_epoch=3`` reaches the Trainer's constructor: its TypeError is worded as
    the key, before anything else is printed, and the run folder Hydra had made is gone."""
    monkeypatch.chdir(tmp_path)
    err = _run(train_main, ["+trainer.max_epoch=3", "trainer.accelerator=cpu"], monkeypatch, capsys)
    assert err == "error: unknown key trainer.max_epoch: did you mean trainer.max_epochs?\n"
    assert capsys.readouterr().out == ""  # no summary, no tree: the error line comes first
    assert (tmp_path / "outputs").is_dir()  # Hydra made a run folder below it: removed
    assert list((tmp_path / "outputs").rglob("*")) == []
