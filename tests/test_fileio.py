"""``atomic_path``: the target holds the old or the new complete file, never a partial one."""

from __future__ import annotations

import os

import pytest

from lightning_cls.fileio import atomic_path, temp_path_for


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
