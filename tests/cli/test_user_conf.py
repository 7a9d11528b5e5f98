"""A ``conf/`` in the working folder is searched after the packaged configs (run_cli)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lightning_cls import cli, config_dir
from lightning_cls.train import main as train_main


def _job_config(argv: list[str], monkeypatch, capsys) -> str:
    """``python -m lightning_cls.train <argv> --cfg job``: the composed config Hydra prints."""
    monkeypatch.setattr(sys, "argv", ["lightning_cls.train", *argv, "--cfg", "job"])
    cli.run_cli(train_main)
    return capsys.readouterr().out


def test_own_experiment_and_data_files_are_found_and_packaged_names_win(
    user_env, tmp_path, monkeypatch, capsys
):
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "data").mkdir()
    (tmp_path / "conf" / "experiment" / "mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /data: photos\ntrainer:\n  max_epochs: 7\n"
    )
    (tmp_path / "conf" / "data" / "photos.yaml").write_text(
        "defaults:\n  - imagefolder\n  - _self_\nname: photos\nroot: my_photos\n"
    )
    # Named like a packaged config: the packaged one is used (--config-dir conf would win).
    (tmp_path / "conf" / "data" / "digits.yaml").write_text("name: not_the_packaged_one\n")
    monkeypatch.chdir(tmp_path)

    mine = _job_config(["experiment=mine"], monkeypatch, capsys)
    assert "  max_epochs: 7\n" in mine
    assert "  name: photos\n" in mine and "  root: my_photos\n" in mine
    assert "not_the_packaged_one" not in _job_config([], monkeypatch, capsys)


def test_a_typo_in_an_own_experiment_name_points_at_the_folder(
    user_env, tmp_path, monkeypatch, capsys
):
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "my_photos.yaml").write_text("# @package _global_\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["lightning_cls.train", "experiment=my_photo"])
    with pytest.raises(SystemExit):
        cli.run_cli(train_main)
    err = capsys.readouterr().err
    assert err.startswith("error: no experiment config named my_photo; did you mean ")
    assert "experiment=my_photos?" in err and "./conf/experiment/<name>.yaml" in err


def test_the_override_is_added_only_for_a_conf_of_the_users_own(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.user_config_override([]) == []  # no ./conf
    (tmp_path / "conf").mkdir()
    assert cli.user_config_override([]) == [f"hydra.searchpath=['file://{tmp_path / 'conf'}']"]
    assert cli.user_config_override(["hydra.searchpath=[pkg://x]"]) == []  # the user's choice
    monkeypatch.chdir(Path(config_dir()).parent)  # a checkout: ./conf is the packaged one
    assert cli.user_config_override([]) == []


def test_stats_says_where_to_paste_its_numbers(tmp_path, capsys):
    from helpers.hydra_configs import compose
    from lightning_cls.stats import stats

    stats(compose("stats", ["data=digits"], tmp=tmp_path))
    assert (
        "# paste into ./conf/data/<yours>.yaml (a conf/ where you run is searched: data=<yours>)"
        in capsys.readouterr().out
    )
