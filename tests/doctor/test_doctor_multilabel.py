"""The data check on a multi-label index (data=multilabel): positives per label, no label-error
ranking (one label per image only), and a cleaned index that reads back as a multilabel index."""

from __future__ import annotations

import shutil

from lightning_cls.data.multilabel import MultiLabelDataModule, read_index, write_color_squares
from lightning_cls.doctor import DoctorOptions, diagnose


def test_multilabel_check_and_its_index(tmp_path):
    root = write_color_squares(tmp_path / "squares", {"train": 40, "test": 10}, prob=0.3)
    shutil.copy(root / "images" / "test_0003.png", root / "images" / "train_0005.png")  # a leak
    index = tmp_path / "clean.csv"
    data = MultiLabelDataModule(str(root), cache=False, val_size=5)
    result = diagnose(data, tmp_path / "r", DoctorOptions(write_index=str(index)))
    assert "task=multilabel" in result["skipped"]["label_issues"]
    assert result["label_issues"] == [] and "label_probe" not in result
    positives = result["balance"]["counts"]["train"]
    assert set(positives) == {"blue", "green", "red", "yellow"} and sum(positives.values()) > 0
    leak = {str(root / "images" / "test_0003.png"), str(root / "images" / "train_0005.png")}
    assert [g for g in result["duplicates"] if set(g["files"]) == leak][0]["cross_split"]
    rows = read_index(index)  # file,labels,split: a multilabel index row for row
    files = {file for file, _, _ in rows}
    assert "images/train_0005.png" not in files and "images/test_0003.png" in files
    assert len(rows) == 49 == result["index"]["kept"]
    by_file = {file: sorted(labels) for file, labels, _ in rows}
    original = {file: sorted(labels) for file, labels, _ in read_index(root / "test.csv")}
    assert by_file["images/test_0003.png"] == original["images/test_0003.png"]
