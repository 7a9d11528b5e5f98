"""data=multilabel: CSV/JSON index files, their errors, and multi-hot streaming chunks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lightning_cls.data.base import data_fields
from lightning_cls.data.multilabel import MultiLabelDataModule, read_index, write_color_squares


@pytest.fixture(scope="module")
def squares(tmp_path_factory) -> Path:
    return write_color_squares(
        tmp_path_factory.mktemp("squares"), {"train": 320, "val": 80, "test": 80}
    )


def _tiny(root: Path, rows: list[str], name: str = "train.csv") -> Path:
    write_color_squares(root, {"train": 4}, image_size=8)
    (root / name).write_text("\n".join(rows) + "\n")
    return root


def test_json_index_and_csv_index_read_the_same_labels(tmp_path):
    root = write_color_squares(tmp_path, {"train": 6}, image_size=8)
    rows = read_index(root / "train.csv")
    entries = [{"file": f, "labels": labels} for f, labels, _ in rows]
    (root / "copy.json").write_text(json.dumps(entries))
    assert [(f, labels) for f, labels, _ in read_index(root / "copy.json")] == [
        (f, labels) for f, labels, _ in rows
    ]
    as_map = {f: labels for f, labels, _ in rows}
    (root / "map.json").write_text(json.dumps(as_map))
    assert {f: labels for f, labels, _ in read_index(root / "map.json")} == as_map


@pytest.mark.parametrize(
    "rows, error, match",
    [
        (
            ["file,labels", "images/train_0000.png,red;;blue,x"],
            ValueError,
            r"train.csv:2 has 3 fields",
        ),
        (
            ["images/nope.png,red"],
            FileNotFoundError,
            r"train.csv:1: image images/nope.png not found",
        ),
        (["file,labels", "images/train_0000.png,"], ValueError, r"lists no labels at all"),
    ],
)
def test_bad_index_rows_are_named(tmp_path, rows, error, match):
    dm = MultiLabelDataModule(str(_tiny(tmp_path, rows)), cache=False)
    with pytest.raises(error, match=match):
        dm.setup()


def test_a_wrong_label_count_is_named(tmp_path):
    root = write_color_squares(tmp_path, {"train": 8}, image_size=8)
    dm = MultiLabelDataModule(str(root), num_classes=3, image_size=8, cache=False)
    with pytest.raises(
        ValueError, match=r"data.num_classes=3 but .*train.csv has 4 labels: .*; set"
    ):
        dm.setup()


def test_a_label_unknown_to_train_is_named_with_its_row(tmp_path):
    root = _tiny(tmp_path, ["images/train_0000.png,red", "images/train_0001.png,blue"])
    (root / "test.csv").write_text("images/train_0002.png,red;purple\n")
    dm = MultiLabelDataModule(str(root), cache=False, val_size=1)
    with pytest.raises(
        ValueError, match=r"test.csv:1: label\(s\) \['purple'\] of .* not in the labels"
    ):
        dm.setup()


def test_missing_index_says_what_to_write(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"has no train.csv or train.json; write one row"):
        _ = MultiLabelDataModule(str(tmp_path)).classes
    with pytest.raises(
        ValueError,
        match=r"data.folds=5 is not supported with data=multilabel.* set data.folds=null",
    ):
        MultiLabelDataModule(str(tmp_path), folds=5)


def test_streaming_chunks_keep_multi_hot_labels(squares, tmp_path):
    pytest.importorskip("litdata")
    from lightning_cls.data.chunks import write_streaming
    from lightning_cls.data.streaming import StreamingDataModule

    data = MultiLabelDataModule(str(squares))
    data.setup()
    splits = {k: (v.images[:40], v.labels[:40]) for k, v in data.splits.items()}
    out = write_streaming(
        splits,
        {**data_fields(data.spec), "task": "multilabel"},
        tmp_path / "chunks",
        progress=False,
    )
    streamed = StreamingDataModule(str(out), batch_size=8)
    assert streamed.task == "multilabel"
    torch.testing.assert_close(streamed.splits["test"].labels, splits["test"][1])
    _, y = next(iter(streamed.test_dataloader()))
    assert y.shape == (8, 4) and y.dtype == torch.float32
    streamed.teardown()


def test_an_excel_csv_with_a_byte_order_mark_reads_like_any_other(tmp_path):
    root = write_color_squares(tmp_path, {"train": 5}, image_size=8)
    plain = read_index(root / "train.csv")
    (root / "train.csv").write_bytes(b"\xef\xbb\xbf" + (root / "train.csv").read_bytes())
    assert [(f, labels) for f, labels, _ in read_index(root / "train.csv")] == [
        (f, labels) for f, labels, _ in plain
    ]


@pytest.mark.parametrize(
    "text, match",
    [
        ("[1, 2", r"is not valid JSON"),
        ('"a.png"', r"holds a str; write a list of"),
        ('[{"labels": ["red"]}]', r"\[0\] is .*each entry needs \"file\""),
        ('[{"file": "a.png", "labels": [1]}]', r"\[0\]: \"labels\" must be a list of label names"),
    ],
)
def test_bad_json_indexes_are_named(tmp_path, text, match):
    (tmp_path / "train.json").write_text(text)
    with pytest.raises(ValueError, match=match):
        read_index(tmp_path / "train.json")


def test_two_indexes_for_one_split_are_refused(tmp_path):
    root = write_color_squares(tmp_path, {"train": 3}, image_size=8)
    (root / "train.json").write_text("{}")
    with pytest.raises(ValueError, match=r"has both train.csv and train.json; keep one"):
        _ = MultiLabelDataModule(str(root)).classes
