"""``python -m lightning_cls.doctor``: the composed config, run in-process."""

from __future__ import annotations

import json

import pytest
from doctor_images import write_split

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


def test_a_one_class_folder_is_one_line_naming_the_folder_and_the_fix(tmp_path):
    root = tmp_path / "images"
    write_split(root, "train", 6, classes=("cat",), seed=1)
    write_split(root, "test", 2, classes=("cat",), seed=2)
    overrides = ["data=imagefolder", f"data.root={root}", "data.cache=false", "doctor.folds=3"]
    message = (
        rf"^data.root={root} has 1 class\(es\): \['cat'\]; a classifier's label check needs "
        r"at least 2: add one folder per class .* or set doctor.label_errors=false"
    )
    with pytest.raises(ValueError, match=message):
        doctor(compose("doctor", overrides, tmp=tmp_path))
    assert not (tmp_path / "run" / "report.md").exists()
    files_only = doctor(compose("doctor", [*overrides, "doctor.label_errors=false"], tmp=tmp_path))
    assert files_only["classes"] == ["cat"] and files_only["label_issues"] == []


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


def test_an_experiment_recipe_is_what_each_fold_trains(folder, tmp_path, monkeypatch):
    """``experiment=cifar10_fast`` composes for the doctor: its network, SGD-Nesterov with the
    triangle schedule, BatchNorm-bias groups, callbacks, label smoothing and channels_last reach
    every fold, each fold with its own copy of the callbacks."""
    import torch

    from lightning_cls.callbacks import Lookahead, WhiteningInit
    from lightning_cls.doctor.__main__ import train_recipe
    from lightning_cls.doctor.kfold import KFoldProbe
    from lightning_cls.inference.tta import TTA

    overrides = [
        "experiment=cifar10_fast",
        "data=imagefolder",
        f"data.root={folder}",
        "data.cache=false",
        "data.batch_size=8",
        "model.widths=[8,16,16]",
        "callbacks.whitening.num_images=16",
        "doctor.folds=3",
        "doctor.probe_epochs=1",
        "doctor.duplicates=false",
        "trainer.accelerator=cpu",
    ]
    cfg = compose("doctor", overrides, tmp=tmp_path)
    recipe = train_recipe(cfg)
    assert recipe.model_name == "airbench" and recipe.model_kwargs["whiten"] is True
    assert recipe.task == {"name": "multiclass", "label_smoothing": 0.2}
    assert recipe.channels_last and recipe.param_groups is not None
    assert [type(c) for c in recipe.callbacks] == [WhiteningInit, Lookahead]
    assert isinstance(recipe.optimizer(torch.nn.Linear(2, 2).parameters()), torch.optim.SGD)
    assert recipe.tta.flip is True and recipe.tta.translate == 1  # airbench's level 2
    # Without the experiment: the doctor's own Adam recipe, no callbacks, no smoothing, no TTA.
    plain = train_recipe(compose("doctor", overrides[1:4] + overrides[8:], tmp=tmp_path))
    assert plain.model_name == "simplecnn" and not plain.callbacks
    assert plain.param_groups is None and plain.task["label_smoothing"] == 0.0
    assert not TTA.from_value(plain.tta).active

    whitened, trained = [], []
    start, fit = WhiteningInit.on_fit_start, KFoldProbe._fit

    def whiten(self, trainer, module):
        whitened.append(id(self))
        return start(self, trainer, module)

    def spy(self, train, seed):
        trained.append(fit(self, train, seed))
        return trained[-1]

    monkeypatch.setattr(WhiteningInit, "on_fit_start", whiten)
    monkeypatch.setattr(KFoldProbe, "_fit", spy)
    result = doctor(cfg)
    assert result["label_probe"]["features"] == "airbench trained 1 epochs per fold"
    assert len(whitened) == 3 and len(set(whitened)) == 3  # a fresh copy per fold
    for module in trained:
        assert isinstance(module.optimizers().optimizer, torch.optim.SGD)
        convs = [p for p in module.net.parameters() if p.dim() == 4]
        assert all(p.is_contiguous(memory_format=torch.channels_last) for p in convs)
