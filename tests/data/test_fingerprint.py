"""Data fingerprints (``data/fingerprint.py``): one sha256 of the files a DataModule reads,
stable across runs and places, changed by any image, cached, checked by
``data.expect_fingerprint``, and carried by results.json and every artifact."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
from PIL import Image

from helpers.hydra_configs import compose
from lightning_cls.data import fingerprint as fp
from lightning_cls.data.imagefolder import ImageFolderDataModule
from lightning_cls.data.multilabel import MultiLabelDataModule, write_color_squares
from lightning_cls.data.synthetic import SyntheticDataModule


@pytest.fixture
def full_root(full_root):
    """The folder of tests/data/conftest.py, its files an hour old: files as fresh as the cache
    are hashed again (their mtime may not show a rewrite), which would hide the cache's work."""
    old = time.time() - 3600
    for path in full_root.rglob("*"):
        os.utime(path, (old, old))
    return full_root


def _fingerprint(root, **kwargs) -> str:
    return ImageFolderDataModule(str(root), image_size=12, **kwargs).fingerprint


def _counting(monkeypatch) -> list[str]:
    """The files whose bytes are hashed from now on."""
    hashed: list[str] = []
    real = fp.file_sha256

    def counting(path):
        hashed.append(str(path))
        return real(path)

    monkeypatch.setattr(fp, "file_sha256", counting)
    return hashed


def test_stable_across_runs_and_places_and_in_the_spec(full_root, tmp_path):
    first = _fingerprint(full_root)
    assert len(first) == 64 and int(first, 16) >= 0
    assert _fingerprint(full_root) == first  # a second DataModule: the same
    moved = shutil.copytree(full_root, tmp_path / "elsewhere")
    assert _fingerprint(moved, cache=False) == first
    data = ImageFolderDataModule(str(full_root), image_size=12)
    assert data.spec.data_fingerprint == first


@pytest.mark.parametrize("change", ["add", "modify", "move", "remove"])
def test_one_image_changes_it(full_root, change):
    before = _fingerprint(full_root)
    image = full_root / "train" / "a" / "000.png"
    if change == "add":
        shutil.copy(image, full_root / "train" / "a" / "new.png")
    elif change == "modify":  # one pixel
        pixels = Image.open(image).convert("RGB")
        pixels.putpixel((0, 0), (255, 255, 255) if pixels.getpixel((0, 0)) != (255,) * 3 else 0)
        pixels.save(image)
    elif change == "move":  # another class: the same bytes, another label
        image.rename(full_root / "train" / "b" / "moved.png")
    else:
        image.unlink()
    assert _fingerprint(full_root) != before


def test_hashes_are_cached_by_path_size_and_mtime(full_root, monkeypatch):
    hashed = _counting(monkeypatch)
    _fingerprint(full_root)
    assert len(hashed) == 3 * 8 + 3 * 2 + 3 * 3  # every image of train/, val/ and test/
    cache = list((full_root / ".lightning_cls_cache").glob("fingerprint-*.json"))
    assert len(cache) == 1
    hashed.clear()
    _fingerprint(full_root)
    assert hashed == []  # the second run reads the cache, not the images
    shutil.copy(full_root / "test" / "a" / "000.png", full_root / "test" / "a" / "new.png")
    _fingerprint(full_root)
    assert [p.rsplit("/", 2)[-2:] for p in hashed] == [["a", "new.png"]]  # only the new file


def test_a_file_as_fresh_as_the_cache_is_hashed_again(full_root):
    """A rewrite within the clock's granularity keeps size and mtime; git's racy rule: an entry
    no older than the cache file is not trusted."""
    image = full_root / "train" / "b" / "003.png"
    tick = time.time_ns() - 10**9  # "now", on a coarse clock
    os.utime(image, ns=(tick, tick))
    _fingerprint(full_root)  # the entry records (size, tick)
    (cache,) = (full_root / ".lightning_cls_cache").glob("fingerprint-*.json")
    os.utime(cache, ns=(tick, tick))  # the cache was written in the same tick
    before = _fingerprint(full_root)
    os.utime(cache, ns=(tick, tick))
    data = bytearray(image.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes, same mtime
    image.write_bytes(bytes(data))
    os.utime(image, ns=(tick, tick))
    assert _fingerprint(full_root) != before


def test_an_unreadable_image_is_left_to_the_decode_step(full_root, monkeypatch):
    """Hashing does not decide what an unreadable file means (data.on_corrupt does)."""
    readable = _fingerprint(full_root, cache=False)
    real = fp.file_sha256

    def denied(path):
        if str(path).endswith("a/001.png"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(fp, "file_sha256", denied)
    assert _fingerprint(full_root, cache=False) not in (None, readable)


def test_an_unwritable_cache_costs_a_rehash_not_an_error(full_root, tmp_path, monkeypatch):
    blocked = tmp_path / "a_file"
    blocked.write_text("not a folder")
    hashed = _counting(monkeypatch)
    expected = _fingerprint(full_root, cache=False)
    assert _fingerprint(full_root, cache_dir=str(blocked / "cache")) == expected
    assert len(hashed) == 2 * 39  # hashed both times: nothing could be cached


def test_expect_fingerprint_refuses_other_files_naming_both_and_what_changed(full_root):
    expected = _fingerprint(full_root)
    assert _fingerprint(full_root, expect_fingerprint=expected.upper()) == expected
    (full_root / "val" / "c" / "001.png").unlink()
    shutil.copy(full_root / "val" / "c" / "000.png", full_root / "val" / "c" / "extra.png")
    found = _fingerprint(full_root)
    data = ImageFolderDataModule(str(full_root), image_size=12, expect_fingerprint=expected)
    with pytest.raises(ValueError, match="^data.expect_fingerprint=") as err:
        data.setup()
    assert str(err.value) == (
        f"data.expect_fingerprint={expected} but data=ImageFolderDataModule at {full_root} has "
        f"fingerprint {found} (since then 1 file(s) added, 1 removed, 0 modified); point "
        f"data.root at the data that was fingerprinted, or set data.expect_fingerprint={found} "
        "to accept this data."
    )
    unknown = "0" * 64  # never computed here: what changed cannot be said
    with pytest.raises(ValueError, match=r"\(what changed is unknown: the file list behind it"):
        _fingerprint(full_root, expect_fingerprint=unknown)


def test_a_source_without_files_has_none_and_refuses_an_expected_one():
    data = SyntheticDataModule(num_classes=2, train_size=8, test_size=4, name="synthetic")
    assert data.fingerprint is None and data.spec.data_fingerprint is None
    data = SyntheticDataModule(num_classes=2, train_size=8, test_size=4, name="synthetic",
                               expect_fingerprint="ab" * 32)  # fmt: skip
    with pytest.raises(
        ValueError,
        match=r"^data.expect_fingerprint=(ab){32} but data=synthetic has no fingerprint \(its "
        r"images are built in or downloaded by name, not read from local files\); set "
        r"data.expect_fingerprint=null\.$",
    ):
        data.setup()


def test_multilabel_index_and_its_labels_are_fingerprinted(tmp_path):
    root = write_color_squares(tmp_path / "sq", {"train": 12, "test": 4}, image_size=8)
    before = MultiLabelDataModule(str(root), image_size=8).fingerprint
    assert MultiLabelDataModule(str(root), image_size=8).fingerprint == before
    index = root / "train.csv"
    rows = index.read_text().splitlines()
    rows[1] = rows[1].split(",")[0] + ",red;green;blue"  # the same images, other labels
    index.write_text("\n".join(rows) + "\n")
    assert MultiLabelDataModule(str(root), image_size=8).fingerprint != before


def test_results_json_and_the_exported_model_carry_it(full_root, tmp_path):
    from lightning_cls.inference import load_artifact
    from lightning_cls.train import train

    cfg = compose(
        overrides=["data=imagefolder", f"data.root={full_root}", "data.image_size=12",
                   "model=mlp", "callbacks=none", "logger=[]",
                   "trainer.enable_checkpointing=false", "trainer.enable_progress_bar=false",
                   "trainer.max_epochs=1", "export=onnx", "test=false",
                   "prediction_mosaic=false"],
        tmp=tmp_path,
    )  # fmt: skip
    train(cfg)
    expected = _fingerprint(full_root)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["data_fingerprint"] == expected
    model = load_artifact(tmp_path / "run" / "export" / "model.onnx")
    assert model.spec.data_fingerprint == expected


def test_expect_fingerprint_on_the_command_line_is_one_error_line(
    full_root, tmp_path, user_command
):
    found = _fingerprint(full_root)
    wrong = "f" * 64
    argv = ["-m", "lightning_cls.train", f"hydra.run.dir={tmp_path}/run", "data=imagefolder",
            f"data.root={full_root}", f"data.expect_fingerprint={wrong}"]  # fmt: skip
    proc = user_command(argv, tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: data.expect_fingerprint={wrong} but data=imagefolder at {full_root} has "
        f"fingerprint {found} (what changed is unknown: the file list behind it is not in this "
        f"machine's cache); point data.root at the data that was fingerprinted, or set "
        f"data.expect_fingerprint={found} to accept this data."
    ]
