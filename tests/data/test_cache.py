"""Decode-once cache: build, reuse (memory-mapped), stale rebuild, atomic writes, corrupt file."""

import json
import logging
import os

import numpy as np
import pytest
import torch

from lightning_cls.data import cache
from lightning_cls.data.imagefolder import ImageFolderDataModule


def _dm(root, tmp_path, **kw):
    return ImageFolderDataModule(
        str(root), image_size=8, cache_dir=str(tmp_path / "cache"), val_size=3, test_size=3, **kw
    )


def _arrays(tmp_path):
    return sorted(p.name for p in (tmp_path / "cache").glob("*.npy"))


def test_build_then_reuse_memory_mapped(image_root, tmp_path, monkeypatch):
    first = _dm(image_root, tmp_path)
    first.setup()
    assert len(_arrays(tmp_path)) == 1 and _arrays(tmp_path)[0].startswith("train-8px-3ch-")
    assert not list((tmp_path / "cache").glob("*.tmp"))  # temporaries renamed away

    def no_decode(*a, **k):
        raise AssertionError("a valid cache must not be decoded again")

    monkeypatch.setattr(cache, "decode_images", no_decode)
    second = _dm(image_root, tmp_path)
    second.setup()
    for name in ("train", "val", "test"):
        assert torch.equal(first.splits[name].images, second.splits[name].images)
        assert torch.equal(first.splits[name].labels, second.splits[name].labels)
    name = _arrays(tmp_path)[0]
    assert isinstance(np.load(tmp_path / "cache" / name, mmap_mode="c"), np.memmap)


def test_default_cache_lives_next_to_the_data(image_root):
    ImageFolderDataModule(str(image_root), image_size=8, val_size=3, test_size=3).setup()
    assert len(list((image_root / ".lightning_cls_cache").glob("train-*.npy"))) == 1


def test_stale_cache_is_rebuilt(image_root, tmp_path, caplog, make_folder):
    _dm(image_root, tmp_path).setup()
    make_folder(image_root, "train", {"cat": 11}, seed=5)  # one image added, others rewritten
    with caplog.at_level(logging.WARNING):
        dm = _dm(image_root, tmp_path)
        dm.setup()
    assert any("is stale" in r.getMessage() for r in caplog.records)
    assert sum(len(s) for s in dm.splits.values()) == 31
    meta = json.loads(next((tmp_path / "cache").glob("train-*.json")).read_text())
    assert len(meta["labels"]) == 31


def test_other_image_size_gets_its_own_cache(image_root, tmp_path):
    _dm(image_root, tmp_path).setup()
    ImageFolderDataModule(
        str(image_root), image_size=6, cache_dir=str(tmp_path / "cache"), val_size=3, test_size=3
    ).setup()
    assert [n.split("-")[1] for n in _arrays(tmp_path)] == ["6px", "8px"]


def test_truncated_cache_is_rebuilt_not_trusted(image_root, tmp_path, caplog):
    _dm(image_root, tmp_path).setup()
    npy = next((tmp_path / "cache").glob("*.npy"))
    npy.write_bytes(npy.read_bytes()[:100])
    with caplog.at_level(logging.WARNING):
        dm = _dm(image_root, tmp_path)
        dm.setup()
    assert any("rebuilding" in r.getMessage() for r in caplog.records)
    assert sum(len(s) for s in dm.splits.values()) == 30


def test_corrupt_file_is_named_and_a_skip_cache_still_fails_in_fail_mode(image_root, tmp_path):
    (image_root / "train" / "eel" / "zz.png").write_bytes(b"\x89PNG broken")
    with pytest.raises(ValueError, match=r"Cannot read image .*eel/zz\.png"):
        _dm(image_root, tmp_path).setup()
    _dm(image_root, tmp_path, on_corrupt="skip").setup()  # caches with the file left out
    with pytest.raises(ValueError, match=r"Cannot read image .*eel/zz\.png"):
        _dm(image_root, tmp_path).setup()


def test_parallel_decode_matches_serial(tmp_path, make_folder):
    root = make_folder(tmp_path / "many", "train", {"a": 300}, size=5)
    files = sorted(str(p) for p in (root / "train" / "a").iterdir())
    files.insert(7, str(tmp_path / "missing.png"))
    serial, errs1 = cache.decode_images(files, 5, 3, workers=1)
    parallel, errs2 = cache.decode_images(files, 5, 3, workers=2)
    assert np.array_equal(serial, parallel) and serial.shape == (301, 3, 5, 5)
    assert [i for i, _ in errs1] == [i for i, _ in errs2] == [7]


def test_fingerprint_tracks_mtime_and_size(image_root):
    files = sorted(str(p) for p in (image_root / "train").rglob("*.png"))
    before = cache.fingerprint(str(image_root), files, 8, 3)
    assert before == cache.fingerprint(str(image_root), files, 8, 3)
    assert before != cache.fingerprint(str(image_root), files, 8, 1)
    st = os.stat(files[0])
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert before != cache.fingerprint(str(image_root), files, 8, 3)


def test_prepare_data_builds_the_cache_setup_reads_it(image_root, tmp_path, monkeypatch):
    _dm(image_root, tmp_path).prepare_data()
    assert len(_arrays(tmp_path)) == 1
    monkeypatch.setattr(cache, "decode_images", lambda *a, **k: pytest.fail("decoded twice"))
    dm = _dm(image_root, tmp_path)
    dm.setup()
    assert sum(len(s) for s in dm.splits.values()) == 30


def test_read_only_root_falls_back_to_the_user_cache(image_root, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(cache.os, "access", lambda path, mode: False)
    ImageFolderDataModule(str(image_root), image_size=8, val_size=3, test_size=3).setup()
    assert len(list((tmp_path / "xdg" / "lightning_cls").glob("train-*.npy"))) == 1
    assert not (image_root / ".lightning_cls_cache").exists()
