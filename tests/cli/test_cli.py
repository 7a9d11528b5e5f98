"""Entry points end a user error with one line on stderr and exit code 1; bugs keep a traceback."""

from __future__ import annotations

import sys

import pytest
from hydra.errors import ConfigCompositionException, InstantiationException
from omegaconf.errors import ConfigKeyError

from lightning_cls import cli


def test_bad_value_ends_in_one_line_naming_it_and_exit_1(tmp_path, user_command):
    """End to end through Hydra and instantiate (the rest of this file runs in-process)."""
    argv = ["-m", "lightning_cls.stats", f"hydra.run.dir={tmp_path}/run", "data.batch_size=0"]
    proc = user_command(argv, tmp_path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: batch_size must be >= 1, got 0. (while building data)"]
    assert proc.stderr.rstrip().endswith(errors[0])


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("HYDRA_FULL_ERROR", "LIGHTNING_CLS_FULL_ERROR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "argv", ["lightning_cls.train"])


def raising(err):
    def main():
        raise err

    return main


def test_config_error_is_one_line_with_hydras_fix(clean_env, capsys):
    err = ConfigCompositionException(
        "Could not override 'data.hflp'.\nTo append to your config use +data.hflp=true"
    )
    err.__cause__ = ConfigKeyError(
        "Key 'hflp' is not in struct\n    full_key: data.hflp\n    object_type=dict"
    )
    with pytest.raises(SystemExit) as exit_info:
        cli.run_cli(raising(err))
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == (
        "error: Could not override 'data.hflp'. To append to your config use +data.hflp=true "
        "Key 'hflp' is not in struct\n"
    )


def test_debug_true_keeps_the_traceback_and_is_not_passed_to_hydra(clean_env, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["lightning_cls.train", "data=mnist", "debug=true"])
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        cli.run_cli(raising(FileNotFoundError("no such checkpoint")))
    assert sys.argv == ["lightning_cls.train", "data=mnist"]


def test_a_bug_keeps_its_traceback(clean_env):
    with pytest.raises(ZeroDivisionError):
        cli.run_cli(raising(ZeroDivisionError("division by zero")))


def wrapped(cause: Exception, message: str) -> InstantiationException:
    """What ``hydra.utils.instantiate`` raises when a constructor raises ``cause``."""
    err = InstantiationException(message)
    err.__cause__ = cause
    return err


def test_instantiate_wrapper_is_unwrapped_and_bugs_are_not_user_errors():
    user = wrapped(
        ValueError("data.val_size=2.0 leaves no train data"), "Error in call\nfull_key: data"
    )
    cause = cli._user_cause(user)
    assert isinstance(cause, ValueError)
    assert cli.describe(cause, where=cli._config_key(user)) == (
        "data.val_size=2.0 leaves no train data (while building data)"
    )
    bug = wrapped(RuntimeError("CUDA error: an illegal memory access"), "Error in call")
    assert cli._user_cause(bug) is None  # a bug: keeps its traceback


@pytest.mark.parametrize(
    "inherited, hydra_full, debug, expected",
    [
        (None, None, False, False),
        (None, "1", False, True),
        (None, None, True, True),
        (
            "0",
            "1",
            False,
            False,
        ),  # a DDP child: HYDRA_FULL_ERROR=1 was set by run_cli, not the user
        ("1", None, False, True),
    ],
)
def test_full_error_switches(monkeypatch, inherited, hydra_full, debug, expected):
    for name, value in (("LIGHTNING_CLS_FULL_ERROR", inherited), ("HYDRA_FULL_ERROR", hydra_full)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert cli._full_error_requested(debug) is expected


def _train_cli(overrides: list[str], tmp_path) -> None:
    """``python -m lightning_cls.train <overrides>`` in-process: the real config, run_cli."""
    from helpers.hydra_configs import compose
    from lightning_cls.train import train

    fast = [
        "trainer.max_epochs=1",
        "+trainer.limit_train_batches=2",
        "+trainer.limit_val_batches=1",
    ]
    cli.run_cli(lambda: train(compose(overrides=[*fast, *overrides], tmp=tmp_path)))


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "task.label_smoothing=1.5",
            "error: task.label_smoothing=1.5 is not a probability; set task.label_smoothing to "
            "a number from 0.0 (off) to 1.0, e.g. 0.1.",
        ),
        (
            "task.logit_norm=-1",
            "error: task.logit_norm=-1 is not a LogitNorm temperature; set a number above 0 "
            "and at most 10 (0.04 is Wei et al.'s for CIFAR-10), or 0 to train without it.",
        ),
        (
            "optimizer.lr=abc",
            "error: optimizer.lr='abc' is not a number; set optimizer.lr to a number (its "
            "default is optimizer.lr=0.001).",
        ),
        (
            "+optimizer.amsgrad=maybe",
            "error: optimizer.amsgrad='maybe' is not true or false; set optimizer.amsgrad to "
            "true or false (its default is optimizer.amsgrad=false).",
        ),
    ],
)
def test_bad_training_settings_end_in_one_line_naming_the_key(
    override, message, clean_env, tmp_path, capsys
):
    """The README's promise for the cases issue 19 found (a traceback, or no key named)."""
    with pytest.raises(SystemExit) as exit_info:
        _train_cli([override], tmp_path)
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == message + "\n"


def test_disabling_the_progress_bar_on_the_command_line_is_honoured(clean_env, tmp_path, capsys):
    """trainer.enable_progress_bar=false with the default callbacks (which add a progress
    bar) trains without a bar instead of failing in Lightning's Trainer. The run prints its
    summary, not the config tree (verbose=false)."""
    _train_cli(["trainer.enable_progress_bar=false", "test=false"], tmp_path)
    assert (tmp_path / "run" / "results.json").is_file()
    out = capsys.readouterr().out
    assert "trainer    max_epochs=1, accelerator=" in out and "conformal_method" not in out


def test_a_missing_extra_is_one_line_and_other_import_errors_are_bugs(clean_env, capsys):
    missing = ImportError("data=streaming needs litdata: pip install 'lightning-cls[streaming]'.")
    with pytest.raises(SystemExit) as exit_info:
        cli.run_cli(raising(missing))
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == f"error: {missing}\n"
    with pytest.raises(ImportError, match="cannot import name 'x'"):
        cli.run_cli(raising(ImportError("cannot import name 'x' from 'y'")))
