"""``atomic_path``: the target holds the old or the new complete file, never a partial one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lightning_cls import fileio
from lightning_cls.fileio import (
    atomic_path,
    atomic_paths,
    atomic_write_text,
    is_temp_file,
    temp_path_for,
)


def test_atomic_path_replaces_on_success_and_keeps_the_old_file_on_error(tmp_path):
    target = tmp_path / "sub" / "out.txt"
    with atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp.name.startswith(".out.txt.")
        tmp.write_text("old")
    assert target.read_text() == "old"

    def write_then_fail():
        with atomic_path(target) as tmp:
            tmp.write_text("new, unchecked")
            raise RuntimeError("check failed")

    with pytest.raises(RuntimeError, match="check failed"):
        write_then_fail()
    assert target.read_text() == "old"
    assert [p.name for p in target.parent.iterdir()] == ["out.txt"]


def test_temp_names_are_hidden_and_can_keep_the_suffix(tmp_path):
    pid = os.getpid()
    assert temp_path_for(tmp_path / "m.ckpt").name == f".m.ckpt.{pid}.tmp"
    assert temp_path_for(tmp_path / "m.pt2", keep_suffix=True).name == f".m.pt2.{pid}.tmp.pt2"


def test_atomic_write_text_replaces_whole(tmp_path):
    target = tmp_path / "results.json"
    atomic_write_text(target, '{"a": 1}\n')
    assert target.read_text() == '{"a": 1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_a_pair_lands_together_or_not_at_all(tmp_path):
    xml, bin_ = tmp_path / "model.xml", tmp_path / "model.bin"
    with atomic_paths(bin_, xml) as (tmp_bin, tmp_xml):
        # one temp stem for both: writers that derive the .bin name from the .xml find it
        assert tmp_xml.with_suffix(".bin") == tmp_bin and is_temp_file(tmp_xml)
        tmp_bin.write_text("weights v1")
        tmp_xml.write_text("graph v1")
    assert (xml.read_text(), bin_.read_text()) == ("graph v1", "weights v1")

    def half_written():
        with atomic_paths(bin_, xml) as (tmp_bin, tmp_xml):
            tmp_bin.write_text("weights v2")
            raise RuntimeError("converter crashed before the .xml")

    with pytest.raises(RuntimeError, match="converter crashed"):
        half_written()
    assert (xml.read_text(), bin_.read_text()) == ("graph v1", "weights v1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin", "model.xml"]
    with pytest.raises(FileNotFoundError, match=r"did not create \.model\.\d+\.tmp\.xml"):
        with atomic_paths(bin_, xml) as (tmp_bin, _):
            tmp_bin.write_text("weights v3")  # the .xml never written: nothing replaced
    assert bin_.read_text() == "weights v1"


def test_the_entry_file_goes_first_and_comes_back_last(tmp_path, monkeypatch):
    """Between the renames a reader finds no .xml, never the old .xml with the new .bin."""
    xml, bin_ = tmp_path / "model.xml", tmp_path / "model.bin"
    xml.write_text("graph v1")
    bin_.write_text("weights v1")
    seen = []
    real_replace = os.replace

    def watching_replace(src, dst):
        seen.append((Path(dst).name, xml.exists() and xml.read_text(), bin_.read_text()))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", watching_replace)
    with atomic_paths(bin_, xml) as (tmp_bin, tmp_xml):
        tmp_bin.write_text("weights v2")
        tmp_xml.write_text("graph v2")
    assert seen == [("model.bin", False, "weights v1"), ("model.xml", False, "weights v2")]
    assert (xml.read_text(), bin_.read_text()) == ("graph v2", "weights v2")


# Files a command's run folder holds that Lightning or Hydra write, not the library: the CSV
# logger's metrics.csv and hparams.yaml (appended per step by Lightning's own writer).
THIRD_PARTY = {"metrics.csv", "hparams.yaml"}


@pytest.fixture
def landed(monkeypatch) -> list[Path]:
    """Every path ``fileio`` lands (each landing is one ``replace_atomically`` call)."""
    paths: list[Path] = []
    real = fileio.replace_atomically

    def record(tmp, filepath, **kwargs):
        real(tmp, filepath, **kwargs)
        paths.append(Path(filepath).resolve())

    monkeypatch.setattr(fileio, "replace_atomically", record)
    return paths


@pytest.mark.slow
def test_every_file_train_export_and_summarize_write_goes_through_fileio(tmp_path, landed):
    from helpers import TRAINED_OVERRIDES
    from helpers.hydra_configs import QUIET_TRAINER, compose
    from lightning_cls.export.__main__ import export
    from lightning_cls.summarize import summarize
    from lightning_cls.train import train

    sweep = tmp_path / "multirun"
    run = sweep / "0"
    overrides = [*QUIET_TRAINER, *TRAINED_OVERRIDES, "trainer.max_epochs=2"]
    summary = train(compose(overrides=[*overrides, f"paths.output_dir={run}"], tmp=tmp_path))
    export_options = [
        f"ckpt_path={summary['best_ckpt']}",
        "export=onnx",
        f"output_dir={run}/export",
    ]
    export(compose("export", export_options, tmp=tmp_path))
    summarize(sweep)

    written = {p.resolve() for p in tmp_path.rglob("*") if p.is_file()}
    library = {p for p in written if p.name not in THIRD_PARTY}
    names = {p.name for p in library}
    # What the three commands write (a plot, a checkpoint, an export, a summary of each kind).
    assert {"config_resolved.yaml", "results.json", "curves.png", "confusion_matrix.png"} <= names
    assert {"predictions_val.png", "last.ckpt", "model_weights.pt", "model.onnx"} <= names
    assert {"meta.json", "summary.md", "summary.csv", "summary.png"} <= names
    missed = sorted(str(p.relative_to(tmp_path)) for p in library - set(landed))
    assert not missed, f"written in place, not through lightning_cls.fileio: {missed}"


def test_atomic_dir_replaces_a_folder_whole_or_leaves_it(tmp_path):
    from lightning_cls.fileio import atomic_dir

    target = tmp_path / "model.mlpackage"
    target.mkdir()
    (target / "old.txt").write_text("old")

    def half_written():
        with atomic_dir(target) as tmp:
            tmp.mkdir()
            (tmp / "half.txt").write_text("half")
            raise RuntimeError("writer failed")

    with pytest.raises(RuntimeError, match="writer failed"):
        half_written()
    assert [p.name for p in tmp_path.iterdir()] == ["model.mlpackage"]  # no temp left
    assert [p.name for p in target.iterdir()] == ["old.txt"]
    with atomic_dir(target) as tmp:
        tmp.mkdir()
        (tmp / "new.txt").write_text("new")
    assert [p.name for p in tmp_path.iterdir()] == ["model.mlpackage"]
    assert [p.name for p in target.iterdir()] == ["new.txt"]
