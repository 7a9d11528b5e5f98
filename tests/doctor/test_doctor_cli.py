"""``python -m lightning_cls.doctor``: the composed config, run in-process."""

from __future__ import annotations

import json

import pytest

from helpers.hydra_configs import compose
from lightning_cls.doctor.__main__ import doctor


def test_doctor_command_writes_the_report_and_an_index_imagefolder_reads(folder, tmp_path):
    (folder / "train" / "a" / "empty.jpg").write_bytes(b"")
    index = tmp_path / "clean.csv"
    overrides = [
        "data=imagefolder",
        f"data.root={folder}",
        "data.cache=false",
        "doctor.folds=3",
        "doctor.label_errors=false",
        f"doctor.write_index={index}",
    ]
    result = doctor(compose("doctor", overrides, tmp=tmp_path))
    run = tmp_path / "run"
    assert json.loads((run / "report.json").read_text())["data"] == "imagefolder"
    assert "empty.jpg" in (run / "report.md").read_text()
    assert result["index"]["kept"] == 32 and index.is_file()
    cfg = compose("train", ["data=imagefolder", f"data.root={folder}", f"data.index={index}"])
    assert cfg.data.index == str(index)


def test_unknown_doctor_option_is_named(tmp_path):
    cfg = compose("doctor", ["+doctor.near=3"], tmp=tmp_path)
    with pytest.raises(ValueError, match=r"Unknown doctor option\(s\) \['near'\]"):
        doctor(cfg)


def test_help_stays_light(tmp_path):
    """--help loads neither Lightning nor torch (a fresh process: what a user waits for)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "lightning_cls.doctor", "--help"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0 and "doctor" in out.stdout, out.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if "|" in line}
    assert not imported & {"torch", "pytorch_lightning", "imagehash", "cleanlab"}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("doctor.probe=kfol", r"Unknown doctor.probe='kfol'. Did you mean 'kfold'\?"),
        ("doctor.probe_epochs=0", r"doctor.probe_epochs=0 must be a whole number >= 1"),
        ("doctor.size_factor=abc", r"doctor.size_factor='abc' is not a number"),
        ("doctor.plant_noise=1.5", r"doctor.plant_noise=1.5 must be a share in \[0, 1\)"),
        ("optimizer.lr=abc", r"optimizer.lr='abc' is not a number"),
    ],
)
def test_bad_doctor_settings_are_one_line_before_the_data_is_read(override, message, tmp_path):
    """data.root does not exist: the setting's error comes first, so nothing was read."""
    overrides = ["data=imagefolder", f"data.root={tmp_path}/nowhere", override]
    with pytest.raises((ValueError, TypeError), match=message):
        doctor(compose("doctor", overrides, tmp=tmp_path))


def test_kfold_probe_trains_the_configured_model_from_the_command(folder, tmp_path, caplog):
    overrides = [
        "data=imagefolder",
        f"data.root={folder}",
        "data.cache=false",
        "doctor.folds=3",
        "doctor.probe_epochs=1",
        "doctor.duplicates=false",
        "model.widths=[4,8]",
        "model.hidden=8",
        "optimizer.lr=0.01",
        "trainer.accelerator=cpu",
    ]
    caplog.set_level("INFO")
    result = doctor(compose("doctor", overrides, tmp=tmp_path))
    assert result["label_probe"]["probe"] == "kfold"
    assert result["label_probe"]["features"] == "simplecnn trained 1 epochs per fold"
    assert not result["label_probe"]["reliable"]  # random pictures: the last line says so
    assert "likely label errors (NOT TRUSTED: see report)" in caplog.text
