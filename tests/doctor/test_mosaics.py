"""The doctor's pictures and report as a newcomer reads them (issue 56): label-issue tiles named
by their file, captions that never overlap, the report's TRUSTED / NOT TRUSTED verdict drawn on
the picture; report.md names every file one way (relative to data.root); the log is doctor.log."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from lightning_cls.data.imagefolder import ImageFolderDataModule
from lightning_cls.doctor import DoctorOptions, diagnose
from lightning_cls.doctor.mosaics import label_issues_mosaic
from lightning_cls.doctor.report import probe_verdict
from lightning_cls.figures.tiles import VERDICT

LONG = "IMG_20240601_123456789_from_a_phone_with_a_long_name.jpg"
CLASSES = ["cat", "dog", "a rather long class name for a label"]


@pytest.fixture
def drawn(monkeypatch):
    """Every text line the mosaic paints: (xy, text, font, anchor), and the image it went on."""
    calls = []
    original = ImageDraw.ImageDraw.text

    def spy(self, xy, text, *args, **kwargs):
        calls.append((xy, text, kwargs.get("font"), kwargs.get("anchor"), self.im.size))
        return original(self, xy, text, *args, **kwargs)

    monkeypatch.setattr(ImageDraw.ImageDraw, "text", spy)
    return calls


def _issues(n: int) -> list[dict]:
    names = [f"train/cat/{LONG}" if i % 2 else f"train/dog/{i:03d}.png" for i in range(n)]
    return [
        {"split": "train", "row": i, "file": names[i], "given": i % 3,
         "suggested": (i + 1) % 3, "suggested_prob": 0.9 - i / 50}
        for i in range(n)
    ]  # fmt: skip


def _probe(reliable: bool) -> dict:
    found = 45 if reliable else 9
    test = {"planted": 60, "found": found, "recall": found / 60, "chance": 0.1, "precision": 0.7}
    return {"probe": "kfold", "out_of_fold_accuracy": 0.6, "reliable": reliable,
            "self_test": test, "min_self_test_recall": 0.5, "min_probe_accuracy": None,
            "folds": 5}  # fmt: skip


def _image_of(split, row):
    return np.random.default_rng(row).integers(0, 256, (3, 40, 40), dtype=np.uint8)


def _box(call) -> tuple[float, float, float, float]:
    xy, text, font, anchor, size = call
    return ImageDraw.Draw(Image.new("RGB", size)).textbbox(xy, text, font=font, anchor=anchor)


def test_label_issue_tiles_are_named_by_file_and_their_captions_never_overlap(drawn, tmp_path):
    path = label_issues_mosaic(
        _issues(11), _image_of, CLASSES, tmp_path / "li.png", 32, _probe(False)
    )
    texts = [call[1] for call in drawn]
    assert "000.png" in texts and "010.png" in texts  # the file's name, not train:0
    long_names = [t for t in texts if t.startswith("IMG_") and t.endswith(".jpg")]
    assert len(long_names) == 5 and all("…" in t for t in long_names)  # shortened, end kept
    assert not any(t.startswith("train:") for t in texts)
    assert "given cat" in texts and "likely dog (0.90)" in texts
    width, height = Image.open(path).size
    boxes = [_box(call) for call in drawn]
    for left, top, right, bottom in boxes:
        assert 0 <= left and right <= width and 0 <= top and bottom <= height
    for a, b in itertools.combinations(boxes, 2):  # no two lines of text share a pixel
        assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)


@pytest.mark.parametrize("reliable", [False, True])
def test_the_reports_verdict_is_drawn_over_the_label_issues(drawn, tmp_path, reliable):
    path = label_issues_mosaic(
        _issues(3), _image_of, CLASSES, tmp_path / "li.png", 32, _probe(reliable)
    )
    trusted, verdict = probe_verdict(_probe(reliable))
    word = "TRUSTED" if reliable else "NOT TRUSTED"
    assert trusted is reliable and verdict.startswith(f"Label findings {word}: the kfold probe")
    assert f"self-test flagged {45 if reliable else 9} of 60 label flips planted" in verdict
    title_font = drawn[0][2]  # the verdict's lines, in the title's font, read as the report's
    lines = [t for _, t, font, _, _ in drawn if font is title_font][1:]
    assert " ".join(lines) == verdict
    pixels = np.asarray(Image.open(path).convert("RGB")).reshape(-1, 3)
    ink, paper = VERDICT[reliable]
    assert (pixels == paper).all(1).sum() > 5000  # the band: green for trusted, red if not
    assert (pixels == VERDICT[not reliable][1]).all(1).sum() == 0


def test_the_report_names_files_relative_to_the_root_and_draws_the_verdict(folder, tmp_path, drawn):
    (folder / "train" / "a" / "empty.png").write_bytes(b"")
    shutil.copy(folder / "test" / "a" / "001.png", folder / "train" / "b" / "leak.png")
    data = ImageFolderDataModule(str(folder), image_size=32, cache=False)
    options = DoctorOptions(folds=3, probe="pixels", min_probe_accuracy=0.99)
    out = tmp_path / "run"
    result = diagnose(data, out, options)
    report = (out / "report.md").read_text()
    assert f"Files are named relative to data.root={folder}." in report
    assert report.count(str(folder)) == 1  # that line only: no absolute path below it
    assert "path: train/a/empty.png" in report and "train/b/leak.png" in report
    assert f"- {result['label_issues'][0]['file']} given " in report
    texts = {call[1] for call in drawn}
    assert Path(result["label_issues"][0]["file"]).name in texts
    assert any(t.startswith("Label findings NOT TRUSTED: the pixels probe") for t in texts)
    assert {"leak.png", "001.png"} <= texts  # the duplicates' tiles: file names too
    assert (out / "label_issues.png").is_file() and (out / "duplicates.png").is_file()


def test_the_doctor_command_logs_to_doctor_log(folder, tmp_path, user_command):
    """``python -m lightning_cls.doctor``: Hydra names the log after the job, which the
    config sets (else the module's file: __main__.log)."""
    argv = ["-m", "lightning_cls.doctor", "data=imagefolder", f"data.root={folder}",
            "data.cache=false", "doctor.label_errors=false", "doctor.duplicates=false",
            f"hydra.run.dir={tmp_path}/run"]  # fmt: skip
    out = user_command(argv, tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    logs = sorted(p.name for p in (tmp_path / "run").glob("*.log"))
    assert logs == ["doctor.log"]
    assert "Data check of data=imagefolder" in (tmp_path / "run" / "doctor.log").read_text()
