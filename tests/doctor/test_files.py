"""Checks of the files: unreadable/truncated/empty named, odd sizes, modes and EXIF rotation."""

from __future__ import annotations

import io
import json

from doctor_images import smooth_image
from PIL import Image

from lightning_cls.data.imagefolder import ImageFolderDataModule
from lightning_cls.doctor import DoctorOptions, diagnose


def _jpeg_bytes(image: Image.Image, **kwargs) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", **kwargs)
    return buffer.getvalue()


def plant_bad_files(folder):
    a, b = folder / "train" / "a", folder / "train" / "b"
    planted = {
        "empty": a / "empty.png",
        "corrupt": a / "corrupt.png",
        "truncated": b / "truncated.jpg",
        "gray": a / "gray.png",
        "cmyk": b / "cmyk.jpg",
        "rotated": b / "rotated.jpg",
        "tiny": a / "tiny.png",
        "huge": b / "huge.png",
    }
    planted["empty"].write_bytes(b"")
    planted["corrupt"].write_bytes(b"\x89PNG\r\n\x1a\n" + b"not an image at all" * 10)
    whole = _jpeg_bytes(smooth_image(901, 64), quality=90)
    planted["truncated"].write_bytes(whole[: len(whole) // 2])
    smooth_image(902).convert("L").save(planted["gray"])
    smooth_image(903).convert("CMYK").save(planted["cmyk"], "JPEG")
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: rotate 90 degrees to view
    planted["rotated"].write_bytes(_jpeg_bytes(smooth_image(904), exif=exif))
    smooth_image(905, 8).save(planted["tiny"])
    smooth_image(906, 400).save(planted["huge"])
    return planted


def test_every_planted_file_problem_is_named(folder, tmp_path):
    planted = plant_bad_files(folder)
    # on_corrupt=fail, as training's default: the doctor still reads the set to name them all
    data = ImageFolderDataModule(str(folder), image_size=32, cache=False, on_corrupt="fail")
    out = tmp_path / "report"
    result = diagnose(data, out, DoctorOptions(label_errors=False, duplicates=False))
    files = json.loads((out / "report.json").read_text())["files"]
    assert files == result["files"]
    problems = {r["path"]: r["problem"] for r in files["unreadable"]}
    assert problems == {
        str(planted["empty"]): "empty",
        str(planted["corrupt"]): "unreadable",
        str(planted["truncated"]): "truncated",
    }
    assert files["checked"] == 2 * 12 + 2 * 4 + len(planted)
    assert [r["path"] for r in files["grayscale_files"]] == [str(planted["gray"])]
    assert [r["path"] for r in files["cmyk_files"]] == [str(planted["cmyk"])]
    assert files["exif_rotated"] == [{"path": str(planted["rotated"]), "orientation": 6}]
    outliers = {r["path"]: r["vs_median"] for r in files["size_outliers"]}
    assert set(outliers) == {str(planted["tiny"]), str(planted["huge"])}
    assert outliers[str(planted["tiny"])] == 0.2 and outliers[str(planted["huge"])] == 10.0
    # the gray file is also equal-channel content (found on the pixels, for any source)
    assert str(planted["gray"]) in {r["path"] for r in files["grayscale_content"]}
    report = (out / "report.md").read_text()
    for path in planted.values():  # named relative to data.root, as every file in report.md
        assert f"path: {path.relative_to(folder).as_posix()}" in report
    assert "Unreadable, truncated or empty files (left out of training): 3" in report
