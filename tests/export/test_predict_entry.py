"""``python -m lightning_cls.predict`` on every artifact kind gives the same CSV top-1."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
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
    config = ExportConfig(formats=["onnx", "pt2", "onnx_int8"], int8={"latency_runs": 2})
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
                [
                    f"ckpt_path={artifact}",
                    f"inputs={folder}",
                    f"output={out}",
                    "top_k=2",
                    "trust_artifact=true",
                ],
                tmp_path,
            )
        )
        rows = list(csv.DictReader(out.open()))
        assert len(rows) == 11
        assert [r["error"] for r in rows if r["error"]] == ["not a readable image"]
        top1[name] = [r["label_1"] for r in rows if not r["error"]]
    assert top1["onnx"] == top1["pt2"] == top1["ckpt"]
    # int8 may flip a borderline image; it must agree on nearly all of them.
    assert sum(a == b for a, b in zip(top1["int8"], top1["ckpt"])) >= 9


def test_predict_cli_user_errors_exit_1_with_one_line(trained, tmp_path, run_predict):
    folder = tmp_path / "empty"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "notes.txt").write_text("no images here")
    base = [f"ckpt_path={trained.ckpt}", f"output={tmp_path}/p.csv"]
    with pytest.raises(FileNotFoundError, match=r"No image files in folder .*empty \(looked for "):
        predict(_compose_predict([*base, f"inputs={folder}"], tmp_path))
    for bad in (0, -3):
        with pytest.raises(ValueError, match=rf"batch_size={bad} must be an integer >= 1"):
            predict(_compose_predict([*base, f"inputs={folder}", f"batch_size={bad}"], tmp_path))
    out = run_predict([*base, f"inputs={folder}", "batch_size=0"], tmp_path)
    assert out.returncode == 1
    assert "batch_size=0 must be an integer >= 1" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.fixture
def run_predict(user_command):
    """``python -m lightning_cls.predict ARGS`` as a user types it (``user_command``)."""

    def run(args, tmp_path, timeout=120):
        argv = ["-m", "lightning_cls.predict", *args, f"paths.root_dir={tmp_path}"]
        argv.append(f"paths.output_dir={tmp_path}/run")
        return user_command(argv, Path.cwd(), timeout=timeout)

    return run


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def _image_folder(trained, folder, n=3):
    folder.mkdir()
    val = trained.data.splits["val"]
    for i in range(n):
        Image.fromarray(val.images[i].permute(1, 2, 0).numpy(), "RGB").save(folder / f"{i}.png")
    return folder


def test_predict_cli_refuses_an_untrusted_pt2_and_loads_it_when_trusted(
    trained, tmp_path, run_predict
):
    pt2 = export_model(trained.net, trained.spec, tmp_path, ExportConfig(formats=["pt2"]))
    folder = _image_folder(trained, tmp_path / "images")
    args = [f"ckpt_path={pt2.paths['pt2']}", f"inputs={folder}", f"output={tmp_path}/p.csv"]
    refused = run_predict(args, tmp_path)
    assert refused.returncode == 1
    (line,) = _error_lines(refused.stderr)
    assert "model.pt2" in line and "can run arbitrary code" in line
    assert "trust_artifact=true" in line
    assert "Traceback" not in refused.stderr
    trusted = run_predict([*args, "trust_artifact=true"], tmp_path)
    assert trusted.returncode == 0, trusted.stderr
    assert len(list(csv.DictReader((tmp_path / "p.csv").open()))) == 3


def test_predict_cli_bad_metadata_and_corrupt_files_exit_1_with_one_line(
    trained, tmp_path, run_predict
):
    import json

    import onnx

    onnx_path = export_model(trained.net, trained.spec, tmp_path, ExportConfig(formats=["onnx"]))
    model = onnx.load(str(onnx_path.paths["onnx"]))
    for entry in model.metadata_props:
        if entry.key == "std":
            entry.value = json.dumps([0.25, 0.0, 0.25])
    onnx.save(model, str(tmp_path / "zero_std.onnx"))
    (tmp_path / "corrupt.onnx").write_bytes(onnx_path.paths["onnx"].read_bytes()[:500])
    folder = _image_folder(trained, tmp_path / "images")
    cases = {
        "zero_std.onnx": [],
        "corrupt.onnx": [],
        "model.onnx": ["+spec.classes=[a,b]"],  # 2 names for 4 outputs
        "model.onnx ": ["+spec.image_size=20"],
    }
    expected = {
        "zero_std.onnx": r"zero_std\.onnx \(metadata_props\): std=\[0\.25, 0\.0, 0\.25\] .*\+spec\.std=",
        "corrupt.onnx": r"Cannot read .*corrupt\.onnx as an ONNX model",
        "model.onnx": r"model\.onnx outputs 4 logits .* 2 classes .*\+spec\.classes=",
        "model.onnx ": r"model\.onnx takes 16x16 images but its spec says image_size=20",
    }
    import re

    for name, extra in cases.items():
        artifact = tmp_path / name.strip()
        out = run_predict(
            [f"ckpt_path={artifact}", f"inputs={folder}", f"output={tmp_path}/p.csv", *extra],
            tmp_path,
        )
        assert out.returncode == 1, (name, out.stderr[-2000:])
        (line,) = _error_lines(out.stderr)
        assert re.search(expected[name], line), line
        assert "Traceback" not in out.stderr and "[E:onnxruntime" not in out.stderr, out.stderr


def test_predict_cli_skips_a_fifo_named_png_instead_of_waiting(trained, tmp_path, run_predict):
    import os

    folder = _image_folder(trained, tmp_path / "images")
    os.mkfifo(folder / "pipe.png")
    out = run_predict(
        [f"ckpt_path={trained.ckpt}", f"inputs={folder}", f"output={tmp_path}/p.csv"],
        tmp_path,
        timeout=90,  # the old reader waited on the FIFO forever
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {Path(r["file"]).name: r for r in csv.DictReader((tmp_path / "p.csv").open())}
    assert rows["pipe.png"]["error"] == "not a regular file (a FIFO); skipped"
    assert all(rows[f"{i}.png"]["label_1"] for i in range(3))
