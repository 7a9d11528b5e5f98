"""The cleaned index the doctor writes, read back by ImageFolder (data.index), and the file
behind each row (ImageFolderDataModule.split_files)."""

from __future__ import annotations

import csv
import shutil

import numpy as np
import pytest
from doctor_images import write_split

from lightning_cls.data import SyntheticDataModule
from lightning_cls.data.imagefolder import ImageFolderDataModule
from lightning_cls.doctor import DoctorOptions, diagnose
from lightning_cls.inference.images import decode_image


def test_cleaned_index_is_read_back_by_imagefolder(folder, tmp_path):
    leak = folder / "train" / "b" / "leak.png"
    shutil.copy(folder / "test" / "a" / "002.png", leak)
    (folder / "train" / "a" / "broken.png").write_bytes(b"broken")
    index = tmp_path / "clean.csv"
    options = DoctorOptions(label_errors=False, write_index=str(index))
    result = diagnose(ImageFolderDataModule(str(folder), cache=False), tmp_path / "r", options)
    assert result["index"]["left_out"] == {"duplicate": 1}
    assert result["index"]["unreadable_not_listed"] == 1
    rows = list(csv.DictReader(index.open()))
    listed = {r["file"] for r in rows}
    assert "train/b/leak.png" not in listed and "test/a/002.png" in listed  # test copy kept
    assert "train/a/broken.png" not in listed and len(rows) == result["index"]["kept"] == 32
    assert {r["split"] for r in rows} == {"train", "val", "test"}
    assert all(r["labels"] == r["file"].split("/")[1] for r in rows)

    data = ImageFolderDataModule(str(folder), cache=False, index=str(index))
    data.setup("fit")  # on_corrupt=fail: the unreadable file is not listed, so not read
    files = [f for found in data.split_files().values() for f in found]
    assert sorted(files) == sorted(str(folder / f) for f in listed)
    assert str(leak) not in files


def test_index_errors_name_the_bad_path(folder, tmp_path):
    missing = tmp_path / "nope.csv"
    with pytest.raises(FileNotFoundError, match=rf"data.index={missing} not found"):
        ImageFolderDataModule(str(folder), cache=False, index=str(missing)).setup()
    bad = tmp_path / "bad.csv"
    bad.write_text("file,labels,split\ntrain/a/000.png,a,train\ntrain/a/gone.png,a,train\n")
    with pytest.raises(FileNotFoundError, match=rf"{bad}:3 lists train/a/gone.png, which is not"):
        ImageFolderDataModule(str(folder), cache=False, index=str(bad)).setup()
    other = tmp_path / "other.csv"
    other.write_text(f"{folder / 'test' / 'a' / '000.png'}\n")  # no header, absolute path
    with pytest.raises(ValueError, match=r"lists none of the 24 images in .*train"):
        ImageFolderDataModule(str(folder), cache=False, index=str(other)).setup()


def test_write_index_of_in_memory_data_is_refused(tmp_path):
    options = DoctorOptions(label_errors=False, duplicates=False, write_index="x.csv")
    with pytest.raises(
        ValueError,
        match=r"doctor.write_index=x.csv needs image files to list, and data=SyntheticDataModule",
    ):
        diagnose(SyntheticDataModule(train_size=16, test_size=8, val_size=4), tmp_path, options)


@pytest.mark.parametrize("layout", ["held_out_test", "val_folder_with_folds"])
def test_split_files_name_the_file_of_every_row(tmp_path, layout):
    root = tmp_path / "images"
    write_split(root, "train", 10, seed=1)
    if layout == "held_out_test":
        kwargs = dict(test_size=4, val_size=5)
    else:
        write_split(root, "val", 3, seed=2)
        write_split(root, "test", 2, seed=3)
        kwargs = dict(folds=3, fold=1)
    data = ImageFolderDataModule(str(root), image_size=16, cache=False, seed=3, **kwargs)
    data.setup("fit")
    files = data.split_files()
    assert set(files) == {"train", "val", "test"}
    assert sum(map(len, files.values())) == (20 if layout == "held_out_test" else 30)
    for name, split in data.splits.items():
        decoded = np.stack([decode_image(f, 16, 3) for f in files[name]])
        np.testing.assert_array_equal(decoded, split.images.numpy())
        labels = [data.classes.index(f.split("/")[-2]) for f in files[name]]
        assert labels == split.labels.tolist()


def test_label_issues_of_an_unreliable_probe_stay_in_the_index():
    from lightning_cls.doctor.index import dropped_rows

    result = {
        "duplicates": [{"members": [["train", 3], ["test", 1], ["val", 2]]}],
        "label_issues": [{"split": "train", "row": 7}],
        "label_probe": {"reliable": True},
    }
    both = ("duplicates", "label_issues")
    assert dropped_rows(result, both) == {
        ("train", 3): "duplicate",
        ("val", 2): "duplicate",  # the test copy stays
        ("train", 7): "label_issue",
    }
    result["label_probe"]["reliable"] = False
    assert ("train", 7) not in dropped_rows(result, both)
    with pytest.raises(ValueError, match=r"doctor.drop has \['typos'\]; use a list of"):
        dropped_rows(result, ["typos"])


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"folds": 1}, r"doctor.folds=1 must be an integer >= 2"),
        ({"near_distance": 32}, r"doctor.near_distance=32 must be in 0..31"),
        ({"size_factor": 0.5}, r"doctor.size_factor=0.5 must be > 1"),
        ({"drop": ("dupes",)}, r"doctor.drop has \['dupes'\]"),
        (
            {"probe": "embedding", "features_from": "gone.ckpt"},
            r"doctor.features_from=gone.ckpt not found",
        ),
        (
            {"probe": "kfol"},
            r"Unknown doctor.probe='kfol'. Did you mean 'kfold'\? Known: auto, embedding",
        ),
        ({"probe": "pixel"}, r"Did you mean 'pixels'\?"),
        (
            {"probe": "kfold+patchs"},
            r"Unknown 'patchs' in doctor.probe='kfold\+patchs'. Did you mean 'patches'\?",
        ),
        ({"probe": "kfold+auto"}, r"joins two or more different ones, 'auto' not among them"),
        ({"probe": "knn+knn"}, r"doctor.probe='knn\+knn': a mean of probes joins two or more"),
        ({"probe": "kfold+embedding"}, r"doctor.probe=embedding needs doctor.features_from="),
        ({"probe": "knn+pixels", "features_from": "x.ckpt"}, r"add doctor.probe=embedding"),
        ({"probe_epochs": 0}, r"doctor.probe_epochs=0 must be a whole number >= 1 \(e.g. 10\)"),
        ({"probe_epochs": 2.5}, r"doctor.probe_epochs=2.5 is not a whole number; set doctor"),
        ({"probe_epochs": "3"}, r"doctor.probe_epochs='3' is not a whole number"),
        ({"size_factor": "abc"}, r"doctor.size_factor='abc' is not a number; set doctor.size_"),
        ({"folds": True}, r"doctor.folds=True is not a whole number"),
        ({"plant_noise": 1.0}, r"doctor.plant_noise=1.0 must be a share in \[0, 1\)"),
        ({"plant_noise": -0.1}, r"doctor.plant_noise=-0.1 must be a share in \[0, 1\)"),
        ({"plant_noise": 0.1, "write_index": "x.csv"}, r"drop doctor.write_index or set doctor"),
        ({"probe": "embedding"}, r"doctor.probe=embedding needs doctor.features_from="),
        ({"features_from": "x.ckpt"}, r"add doctor.probe=embedding, or drop doctor.features_from"),
    ],
)
def test_bad_settings_are_refused_before_reading_the_data(setting, message, tmp_path):
    data = SyntheticDataModule(train_size=16, test_size=8, val_size=4)
    with pytest.raises((ValueError, TypeError, FileNotFoundError), match=message):
        diagnose(data, tmp_path, DoctorOptions(**setting))
    assert not data.splits  # refused before setup()


def test_more_folds_than_images_names_doctor_folds_before_any_check(tmp_path):
    data = SyntheticDataModule(train_size=16, test_size=8, val_size=4)
    with pytest.raises(ValueError, match=r"doctor.folds=100000 is more than the 24 images the "
                       r"label check splits into folds; set doctor.folds to at most 24"):  # fmt: skip
        diagnose(data, tmp_path, DoctorOptions(folds=100000))
    assert not (tmp_path / "report.md").exists()
