"""``python -m lightning_cls.predict`` on every artifact kind gives the same CSV top-1."""

from __future__ import annotations

import csv

from PIL import Image

from lightning_cls.export.exporter import ExportConfig, export_model
from lightning_cls.predict import predict


def _compose_predict(overrides, tmp):
    from hydra import compose, initialize_config_dir

    from lightning_cls import config_dir

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose(
            "predict", [f"paths.root_dir={tmp}", f"paths.output_dir={tmp}/run", *overrides]
        )


def test_predict_cli_same_top1_for_ckpt_onnx_int8_pt2(trained, tmp_path):
    val = trained.data.splits["val"]
    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(10):
        Image.fromarray(val.images[i].permute(1, 2, 0).numpy(), "RGB").save(folder / f"{i:02d}.png")
    (folder / "broken.png").write_bytes(b"not a png")
    config = ExportConfig(formats=["onnx", "pt2"])
    config.quantize.static, config.quantize.latency_runs = True, 2
    paths = export_model(trained.net, trained.spec, tmp_path / "export", config, trained.data).paths
    top1 = {}
    for name, artifact in [
        ("ckpt", trained.ckpt),
        ("onnx", paths["onnx"]),
        ("int8", paths["onnx_int8"]),
        ("pt2", paths["pt2"]),
    ]:
        out = tmp_path / f"{name}.csv"
        predict(
            _compose_predict(
                [f"ckpt_path={artifact}", f"inputs={folder}", f"output={out}", "top_k=2"], tmp_path
            )
        )
        rows = list(csv.DictReader(out.open()))
        assert len(rows) == 11
        assert [r["error"] for r in rows if r["error"]] == ["not a readable image"]
        top1[name] = [r["label_1"] for r in rows if not r["error"]]
    assert top1["onnx"] == top1["pt2"] == top1["ckpt"]
    # int8 may flip a borderline image; it must agree on nearly all of them.
    assert sum(a == b for a, b in zip(top1["int8"], top1["ckpt"])) >= 9


def test_predict_cli_user_errors_exit_1_with_one_line(trained, tmp_path):
    import subprocess
    import sys

    import pytest

    folder = tmp_path / "empty"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "notes.txt").write_text("no images here")
    base = [f"ckpt_path={trained.ckpt}", f"output={tmp_path}/p.csv"]
    with pytest.raises(FileNotFoundError, match=r"No image files in folder .*empty \(looked for "):
        predict(_compose_predict([*base, f"inputs={folder}"], tmp_path))
    for bad in (0, -3):
        with pytest.raises(ValueError, match=rf"batch_size={bad} must be an integer >= 1"):
            predict(_compose_predict([*base, f"inputs={folder}", f"batch_size={bad}"], tmp_path))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_cls.predict",
            *base,
            f"inputs={folder}",
            "batch_size=0",
            f"paths.root_dir={tmp_path}",
            f"paths.output_dir={tmp_path}/run",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert "batch_size=0 must be an integer >= 1" in out.stderr
    assert "Traceback" not in out.stderr
