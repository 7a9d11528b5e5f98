"""benchmarks/transfer_data.py: the folders of the transfer experiment in docs/benchmarks.md."""

from __future__ import annotations

import pytest


def test_quick_mode_runs(run_quick):
    assert run_quick("transfer_data.py") == {
        "pre": {"train": 225, "val": 25},
        "fine": {"train": 5, "val": 5, "test": 25},
    }


def test_splits_take_the_documented_files_and_never_overlap(benchmark_module, tmp_path):
    transfer = benchmark_module("transfer_data")
    source = tmp_path / "train"
    for name in ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse"):
        (source / name).mkdir(parents=True)
        for i in range(12):
            (source / name / f"{i:04d}.jpg").write_bytes(b"x")
    (source / "ship").mkdir()
    (source / "truck").mkdir()
    pre = transfer.make_tree(source, tmp_path / "pre", (0, 5), {"train": (0, 9), "val": (9, 12)})
    assert pre == {"train": 45, "val": 15}
    assert sorted(p.name for p in (tmp_path / "pre" / "train").iterdir()) == [
        "airplane",
        "automobile",
        "bird",
        "cat",
        "deer",
    ]
    assert sorted(p.name for p in (tmp_path / "pre" / "val" / "cat").iterdir()) == [
        "0009.jpg",
        "0010.jpg",
        "0011.jpg",
    ]
    slices = {"train": (0, 2), "val": (2, 4), "test": (4, 9)}
    transfer.make_tree(source, tmp_path / "fine", (5, 8), slices)
    dog = {s: sorted(p.name for p in (tmp_path / "fine" / s / "dog").iterdir()) for s in slices}
    assert dog["train"] == ["0000.jpg", "0001.jpg"] and dog["val"] == ["0002.jpg", "0003.jpg"]
    assert len(dog["test"]) == 5 and not set(dog["test"]) & set(dog["train"] + dog["val"])
    with pytest.raises(FileNotFoundError, match="ship has too few files for train"):
        transfer.make_tree(source, tmp_path / "bad", (5, 10), slices)  # ship/truck are empty
