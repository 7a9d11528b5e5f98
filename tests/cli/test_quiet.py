"""Quiet by default: a summary instead of the config tree, no Lightning tips, the error first,
no run folder left by a failed command (cli/quiet.py, cli/printing.py, run_cli)."""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings

import pytest
from omegaconf import OmegaConf

from helpers.hydra_configs import compose
from lightning_cls import cli
from lightning_cls.cli import quiet
from lightning_cls.cli.printing import print_run
from lightning_cls.stats import main as stats_main

TIP = "💡 Tip: For seamless cloud logging and experiment tracking, try installing [litlogger]"
SRUN = "The `srun` command is available on your system but is not used. HINT: ..."
RANK_ZERO = "pytorch_lightning.utilities.rank_zero"


def _said(caplog, verbose: bool) -> tuple[list[str], list[str]]:
    """What Lightning's logger and warnings let through within ``lightning_messages``."""
    caplog.set_level(logging.INFO, logger=RANK_ZERO)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        with quiet.lightning_messages(verbose):
            for _ in range(3):  # the doctor's k-fold: a Trainer per fold
                logging.getLogger(RANK_ZERO).info(TIP)
                logging.getLogger(RANK_ZERO).info("GPU available: False, used: False")
                warnings.warn(SRUN, UserWarning, stacklevel=1)
        logging.getLogger(RANK_ZERO).info(TIP)  # after the block: as before
    logged = [r.getMessage() for r in caplog.records]
    assert logged[-1] == TIP
    return logged[:-1], [str(w.message) for w in caught]


def test_lightnings_tips_are_hidden_by_default(caplog):
    logged, warned = _said(caplog, verbose=False)
    assert logged == ["GPU available: False, used: False"]  # not a tip: kept, once
    assert warned == []


def test_verbose_shows_each_tip_once(caplog):
    logged, warned = _said(caplog, verbose=True)
    assert logged == [TIP, "GPU available: False, used: False"]
    assert warned == [SRUN]


def _hydra_run_folder(tmp_path, *extra: str):
    """A run folder as Hydra leaves it before the job's code runs, plus ``extra`` files."""
    folder = tmp_path / "outputs" / "train" / "2026-01-01" / "10-00-00"
    (folder / ".hydra").mkdir(parents=True)
    for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
        (folder / ".hydra" / name).write_text("{}\n")
    for name in ("train.log", *extra):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x")
    quiet.RunFolder.last.update(folder=folder, log_dir=tmp_path / "outputs")
    return folder


def test_a_failed_runs_folder_of_hydras_files_is_removed(tmp_path):
    started = time.time()
    folder = _hydra_run_folder(tmp_path)
    assert quiet.remove_failed_run(made_after=started)
    assert not folder.exists() and not folder.parent.exists()  # the emptied date folder too
    assert (tmp_path / "outputs").is_dir()


@pytest.mark.parametrize("extra", ["checkpoints/x/last.ckpt", "results.json", "notes.txt"])
def test_a_folder_holding_anything_else_is_kept(tmp_path, extra):
    started = time.time()
    folder = _hydra_run_folder(tmp_path, extra)
    assert not quiet.remove_failed_run(made_after=started)
    assert (folder / extra).is_file()


def test_a_folder_with_older_files_or_outside_the_logs_is_kept(tmp_path):
    started = time.time()
    folder = _hydra_run_folder(tmp_path)
    os.utime(folder / "train.log", (started - 3600, started - 3600))  # an earlier run's log
    assert not quiet.remove_failed_run(made_after=started)
    (folder / "train.log").write_text("x")  # this run's again, but not below the logs folder
    quiet.RunFolder.last.update(folder=folder, log_dir=tmp_path / "elsewhere")
    assert not quiet.remove_failed_run(made_after=started)
    assert folder.is_dir()


def test_a_data_error_is_the_only_line_on_stderr_and_leaves_no_run_folder(
    user_env, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["lightning_cls.stats", "data.batch_size=0"])
    with pytest.raises(SystemExit) as exit_info:
        cli.run_cli(stats_main)
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == (
        "error: batch_size must be >= 1, got 0. (while building data)\n"
    )  # no "Error executing job with overrides" before it
    assert (tmp_path / "outputs").is_dir()  # Hydra had made outputs/stats/<date>/<time>
    assert list((tmp_path / "outputs").rglob("*")) == []


def test_a_run_prints_a_short_summary_and_the_tree_only_when_verbose(tmp_path, capsys):
    cfg = OmegaConf.to_container(compose("train", tmp=tmp_path), resolve=True)
    print_run(cfg)
    summary = capsys.readouterr().out.splitlines()
    assert len(summary) <= 10
    assert [line.split()[0] for line in summary] == [
        "experiment", "data", "model", "task", "optimizer", "trainer", "run", "config"
    ]  # fmt: skip
    assert summary[1].startswith("data       digits: 10 classes")
    assert summary[-1].endswith(".hydra/config.yaml  (verbose=true prints it here)")
    print_run(cfg, verbose=True)
    tree = capsys.readouterr().out
    assert "optimized_metric" in tree and "conformal_method" in tree


def test_the_verbose_tree_keeps_long_values_whole_in_a_log(capsys):
    print_run({"data": {"root": "/data/" + "x" * 150}}, verbose=True)
    assert "/data/" + "x" * 150 in capsys.readouterr().out  # not cropped at 80 columns
