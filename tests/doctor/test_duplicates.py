"""Exact and near duplicates within and across splits (lightning_cls/doctor/duplicates.py)."""

from __future__ import annotations

import io
import shutil

import numpy as np
import pytest
from PIL import Image, ImageEnhance

from lightning_cls.data.imagefolder import ImageFolderDataModule
from lightning_cls.doctor import DoctorOptions, diagnose
from lightning_cls.doctor.duplicates import near_pairs


def test_near_pairs_equal_brute_force():
    rng = np.random.default_rng(0)
    base = rng.integers(0, 2**63, 40, dtype=np.uint64)
    flips = rng.integers(0, 64, (40, 3))  # near copies: 0-3 bits flipped
    near = base ^ np.array(
        [sum(1 << int(b) for b in set(f[: i % 4])) for i, f in enumerate(flips)], dtype=np.uint64
    )
    hashes = np.unique(np.concatenate([base, near]))
    brute = {
        (i, j)
        for i in range(len(hashes))
        for j in range(i + 1, len(hashes))
        if np.bitwise_count(hashes[i] ^ hashes[j]) <= 3
    }
    found = {(i, j) for i, j, _ in near_pairs(hashes, 3)}
    assert found == brute and len(brute) >= 25


def test_near_distance_out_of_range_is_named():
    with pytest.raises(ValueError, match=r"doctor.near_distance=40 must be in 0..31"):
        near_pairs(np.zeros(2, dtype=np.uint64), 40)


def _jpeg_copy(src, dst, quality=75):
    buffer = io.BytesIO()
    Image.open(src).convert("RGB").save(buffer, "JPEG", quality=quality)
    dst.write_bytes(buffer.getvalue())


def test_duplicates_planted_across_train_and_test_are_all_found(folder, tmp_path):
    test_a, test_b = folder / "test" / "a", folder / "test" / "b"
    planted = {  # a train copy of a test image, changed the ways copies change
        "exact": (test_a / "000.png", folder / "train" / "a" / "copy_exact.png"),
        "jpeg": (test_a / "001.png", folder / "train" / "b" / "copy_jpeg.jpg"),
        "resized": (test_b / "000.png", folder / "train" / "a" / "copy_resized.png"),
        "brighter": (test_b / "001.png", folder / "train" / "b" / "copy_brighter.png"),
    }
    shutil.copy(*planted["exact"])
    _jpeg_copy(*planted["jpeg"])
    Image.open(planted["resized"][0]).resize((64, 64), Image.BILINEAR).save(planted["resized"][1])
    ImageEnhance.Brightness(Image.open(planted["brighter"][0])).enhance(1.1).save(
        planted["brighter"][1]
    )
    within = (folder / "train" / "a" / "005.png", folder / "train" / "a" / "copy_within.png")
    shutil.copy(*within)
    data = ImageFolderDataModule(str(folder), image_size=32, cache=False, val_size=4, seed=0)
    result = diagnose(data, tmp_path / "report", DoctorOptions(label_errors=False))

    groups = {frozenset(g["files"]): g for g in result["duplicates"]}
    for kind, (original, copy) in planted.items():
        group = groups.get(frozenset({str(original), str(copy)}))
        assert group is not None, f"{kind} copy not found: {sorted(map(sorted, groups))}"
        assert group["cross_split"] and "test" in group["splits"]
        assert group["kind"] == ("exact" if kind == "exact" else "near")
    # the within-split copy is a group too, whichever split (train or the carved val) holds it
    assert frozenset(map(str, within)) in groups
    assert len(groups) == 5  # and no distinct pictures grouped
    report = (tmp_path / "report" / "report.md").read_text()
    assert "5 groups of copies (10 images); 4 across splits" in report
    assert f"{planted['jpeg'][1].relative_to(folder).as_posix()}" in report  # below data.root
    assert (tmp_path / "report" / "duplicates.png").stat().st_size > 0
