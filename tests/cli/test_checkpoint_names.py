"""One name for the model file and one for trust across the commands (issue 56, item 2):
``ckpt_path=`` (a .ckpt, any exported artifact, or a training run's folder: the best checkpoint
its results.json names) and ``trust_artifact=``; serve's old ``artifact=`` and
``serve.trust_artifact=`` still work, each with one warning line naming the new key."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from lightning_cls.cli.renamed import renamed
from lightning_cls.cli.run_config import checkpoint_file


def _run_folder(root: Path, best: str, run_dir: str | None = None) -> Path:
    """A training run's folder as train.py leaves it: results.json naming ``best``."""
    root.mkdir(parents=True, exist_ok=True)
    results = {"run_dir": run_dir or str(root), "best_ckpt": best, "val": {}}
    (root / "results.json").write_text(json.dumps(results))
    return root


def test_a_run_folder_is_its_best_checkpoint(tmp_path):
    ckpt = tmp_path / "run" / "checkpoints" / "exp" / "epoch=3.ckpt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"x")
    folder = _run_folder(tmp_path / "run", str(ckpt))
    assert checkpoint_file(folder) == str(ckpt)
    assert checkpoint_file(str(ckpt)) == str(ckpt)  # a file: as given
    assert checkpoint_file("missing.onnx") == "missing.onnx"  # the loader's error names it


def test_a_moved_run_folder_still_finds_its_checkpoint(tmp_path):
    moved = tmp_path / "moved"
    (moved / "checkpoints").mkdir(parents=True)
    (moved / "checkpoints" / "best.ckpt").write_bytes(b"x")
    _run_folder(moved, "/gone/run/checkpoints/best.ckpt", run_dir="/gone/run")
    assert checkpoint_file(moved) == str(moved / "checkpoints" / "best.ckpt")


def test_a_folder_without_a_best_checkpoint_is_one_clear_error(tmp_path):
    fix = "pass a .ckpt file (or an exported artifact), or a training run's folder."
    with pytest.raises(FileNotFoundError, match=rf"^ckpt_path={tmp_path} is a folder without "
                       rf"results\.json; {re.escape(fix)}$"):  # fmt: skip
        checkpoint_file(tmp_path)
    _run_folder(tmp_path, "")  # train=false: nothing was fitted
    with pytest.raises(FileNotFoundError, match=r"results\.json names no best_ckpt; pass a"):
        checkpoint_file(tmp_path)
    _run_folder(tmp_path, str(tmp_path / "deleted.ckpt"))
    with pytest.raises(FileNotFoundError, match=r"names best_ckpt=.*deleted\.ckpt, which does not"):
        checkpoint_file(tmp_path)


def test_a_folder_artifact_is_not_a_run_folder(tmp_path):
    package = tmp_path / "model.mlpackage"
    package.mkdir()
    assert checkpoint_file(package) == str(package)


def test_serve_old_keys_are_spelt_as_the_new_ones_with_one_warning_each(capsys):
    args = ["artifact=m.onnx", "+serve.trust_artifact=true", "serve.port=8001", "--cfg=job"]
    assert renamed("serve", args) == [
        "ckpt_path=m.onnx",
        "trust_artifact=true",
        "serve.port=8001",
        "--cfg=job",
    ]
    assert capsys.readouterr().err.splitlines() == [
        "warning: artifact= is deprecated and will be removed; use ckpt_path= (same meaning): "
        "ckpt_path=m.onnx",
        "warning: serve.trust_artifact= is deprecated and will be removed; use trust_artifact= "
        "(same meaning): trust_artifact=true",
    ]
    assert renamed("predict", ["artifact=m.onnx"]) == ["artifact=m.onnx"]  # serve's old key only


def test_serve_cli_takes_the_old_keys_with_a_warning(artifacts, tmp_path, user_command):
    argv = ["-m", "lightning_cls.serve", f"artifact={artifacts.paths['pt2']}"]
    argv += ["serve.trust_artifact=no", f"hydra.run.dir={tmp_path}/run"]
    out = user_command(argv, tmp_path)
    lines = out.stderr.splitlines()
    assert out.returncode == 1, out.stderr[-2000:]
    assert [line.split(";")[1] for line in lines if line.startswith("warning:")] == [
        " use ckpt_path= (same meaning): ckpt_path=" + str(artifacts.paths["pt2"]),
        " use trust_artifact= (same meaning): trust_artifact=no",
    ]
    errors = [line for line in lines if line.startswith("error:")]
    assert errors and errors[0].startswith("error: trust_artifact='no' is not a boolean;"), lines


def test_serve_cli_names_ckpt_path_when_the_model_is_missing(tmp_path, user_command):
    out = user_command(["-m", "lightning_cls.serve", f"hydra.run.dir={tmp_path}/r"], tmp_path)
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1].startswith("error: Missing mandatory value: ckpt_path")


def test_predict_takes_a_run_folder(artifacts, tmp_path, user_command):
    from helpers.trained import png_bytes

    images = tmp_path / "images"
    images.mkdir()
    for i in range(3):
        (images / f"{i}.png").write_bytes(png_bytes(artifacts.images[i]))
    folder = _run_folder(tmp_path / "run", str(artifacts.paths["ckpt"]))
    argv = ["-m", "lightning_cls.predict", f"ckpt_path={folder}", f"inputs={images}"]
    out = user_command([*argv, f"output={tmp_path}/p.csv", f"hydra.run.dir={tmp_path}/o"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(list(csv.DictReader((tmp_path / "p.csv").open()))) == 3


@pytest.mark.parametrize("command", ["eval", "calibrate", "export", "explain", "predict", "serve"])
def test_every_command_refuses_a_folder_without_results_in_one_line(
    command, tmp_path, user_command
):
    folder = tmp_path / "not_a_run"
    folder.mkdir()
    argv = ["-m", f"lightning_cls.{command}", f"ckpt_path={folder}"]
    argv += [f"inputs={tmp_path}"] if command in ("explain", "predict") else []
    out = user_command([*argv, f"hydra.run.dir={tmp_path}/o"], tmp_path)
    assert out.returncode == 1, out.stderr[-2000:]
    assert out.stderr.splitlines()[-1] == (
        f"error: ckpt_path={folder} is a folder without results.json; pass a .ckpt file "
        "(or an exported artifact), or a training run's folder."
    )


def test_reject_null_still_means_no_rule_now_that_reject_is_a_group(tmp_path):
    from helpers.hydra_configs import compose

    args = renamed("train", ["reject=null", "+reject=null", "data=digits"])
    assert args == ["reject=none", "+reject=none", "data=digits"]
    cfg = compose("train", args[:1], tmp=tmp_path)  # Hydra takes no null for a group
    assert cfg.reject.name is None  # conf/reject/none.yaml: no rule
