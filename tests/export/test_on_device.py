"""On-device formats (issue 40): ExecuTorch ``.pte``, LiteRT ``.tflite``, Core ML ``.mlpackage``.

Each is written through the one skeleton (``export_format``), read back by the runtime that
serves it, and compared with eager PyTorch on 256 real images of the tiny trained model:
top-1 equal and max |Δlogit| <= 1e-4. The extras (executorch, litert, coreml) are part of
``make install-dev``, so these tests run in the suite; ``importorskip`` only guards a
hand-made environment without them.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from lightning_cls.export import export_format
from lightning_cls.export.writer import FORMATS, ExportData
from lightning_cls.inference import load_artifact
from lightning_cls.inference.runtimes import open_runtime

PARITY_IMAGES = 256


def parity(trained, runtime) -> tuple[float, float]:
    """(max |Δlogit|, top-1 agreement) of ``runtime`` against eager on 256 train images."""
    images = trained.data.splits["train"].images[:PARITY_IMAGES]  # (256, C, H, W) uint8
    x = trained.spec.preprocess(images).float()
    with torch.no_grad():
        expected = trained.net(x)
    actual = torch.as_tensor(runtime(x))
    agree = (actual.argmax(1) == expected.argmax(1)).float().mean().item()
    return (actual - expected).abs().max().item(), agree


@pytest.fixture(scope="module")
def pte(trained, tmp_path_factory):
    pytest.importorskip("executorch")
    path = tmp_path_factory.mktemp("pte") / "model.pte"
    return export_format("executorch", trained.net, trained.spec, path)


def test_executorch_matches_eager_on_256_images_and_carries_the_spec(trained, pte):
    runtime = open_runtime(pte)
    assert runtime.kind == "executorch" and runtime.spec == trained.spec
    delta, agree = parity(trained, runtime)  # 256 > max_batch: run in chunks of 64
    assert delta <= 1e-4 and agree == 1.0


def predict_top1(user_command, trained, artifact, tmp_path) -> list[str]:
    """``python -m lightning_cls.predict ckpt_path=<artifact>`` on 4 validation images."""
    folder = tmp_path / "images"
    folder.mkdir(exist_ok=True)
    val = trained.data.splits["val"]
    for i in range(4):
        Image.fromarray(val.images[i].permute(1, 2, 0).numpy(), "RGB").save(folder / f"{i}.png")
    out = tmp_path / f"{artifact.suffix[1:]}.csv"
    argv = ["-m", "lightning_cls.predict", f"ckpt_path={artifact}", f"inputs={folder}"]
    argv += [f"output={out}", f"paths.root_dir={tmp_path}", f"paths.output_dir={tmp_path}/run"]
    done = user_command(argv, tmp_path)
    assert done.returncode == 0, done.stderr
    return [row["label_1"] for row in csv.DictReader(out.open())]


def eager_top1(trained, n: int = 4) -> list[str]:
    probs = load_artifact(trained.ckpt).predict_images(trained.data.splits["val"].images[:n])
    return [trained.spec.classes[i] for i in probs.argmax(1)]


def test_executorch_predicts_through_the_predict_command(trained, pte, tmp_path, user_command):
    assert predict_top1(user_command, trained, pte, tmp_path) == eager_top1(trained)


def test_executorch_rejects_a_bad_max_batch(trained, tmp_path):
    with pytest.raises(ValueError, match=r"max_batch=0; use a positive integer"):
        export_format("executorch", trained.net, trained.spec, tmp_path / "m.pte", max_batch=0)


@pytest.fixture(scope="module")
def tflite(trained, tmp_path_factory):
    pytest.importorskip("ai_edge_litert")
    from lightning_cls.export.litert import converter_python

    if converter_python() is None:  # make test does not build the converter's environment
        pytest.skip("litert-torch's environment is absent: make venv-litert (or LITERT_PYTHON)")
    path = tmp_path_factory.mktemp("tflite") / "model.tflite"
    return export_format("litert", trained.net, trained.spec, path)


def test_litert_matches_eager_on_256_images_and_carries_the_spec(trained, tflite):
    runtime = open_runtime(tflite)
    assert runtime.kind == "litert" and runtime.spec == trained.spec
    delta, agree = parity(trained, runtime)
    assert delta <= 1e-4 and agree == 1.0


def test_litert_predicts_through_the_predict_command(trained, tflite, tmp_path, user_command):
    assert predict_top1(user_command, trained, tflite, tmp_path) == eager_top1(trained)


def test_litert_without_its_converter_names_make_venv_litert(trained, tmp_path, monkeypatch):
    from lightning_cls.export import litert

    monkeypatch.setattr(litert, "converter_python", lambda: None)
    with pytest.raises(FileNotFoundError, match=r"run `make venv-litert`"):
        export_format("litert", trained.net, trained.spec, tmp_path / "m.tflite")
    assert not list(tmp_path.iterdir())  # nothing left behind


@pytest.fixture(scope="module")
def tflite_int8(trained, tflite, tmp_path_factory):
    """``model_int8.tflite`` through the INT8 skeleton: PT2E calibrated on the train split in
    the converter's environment, gated against ``model.tflite``; (path, gate report)."""
    from lightning_cls.export.int8 import Int8Options, LiteRTInt8
    from lightning_cls.export.writer import ExportData

    data = trained.data.splits
    writer = LiteRTInt8(Int8Options(latency_runs=0))
    writer.bind({"litert": tflite}, ExportData(data["train"], data["val"]))
    path = writer.export(trained.net, trained.spec, tflite.parent / "model_int8.tflite")
    return path, writer.report


def test_litert_int8_reads_back_int8_with_the_spec_agrees_with_eager_and_passes_the_gate(
    trained, tflite_int8
):
    path, report = tflite_int8
    runtime = open_runtime(path)
    assert runtime.kind == "litert" and runtime.spec == trained.spec
    assert runtime.input["dtype"] == np.int8  # quantized: not the fp32 graph under a new name
    delta, agree = parity(trained, runtime)
    assert agree >= 0.95 and delta > 1e-4, (agree, delta)
    assert report.method == "litert_pt2e_int8" and report.accepted
    assert report.fp32_path.endswith("model.tflite") and report.drop_points <= 1.0
    assert report.size_after < report.size_before


@pytest.mark.slow  # two conversions in litert-torch's environment (~25 s on 2 cores)
def test_cli_export_litert_int8_writes_both_files_and_the_gate_report(
    trained, tflite, helpers, tmp_path
):
    from helpers import TRAINED_OVERRIDES
    from lightning_cls.export.__main__ import export

    argv = [f"ckpt_path={trained.ckpt}", "export=litert_int8", f"output_dir={tmp_path}/out"]
    result = export(helpers.compose([*argv, *TRAINED_OVERRIDES], tmp_path))
    assert sorted(result.paths) == ["litert", "litert_int8"]
    (report,) = result.reports
    assert report.method == "litert_pt2e_int8" and report.accepted and report.drop_points <= 1.0
    assert (tmp_path / "out" / "quantization_report.json").is_file()
    assert open_runtime(result.paths["litert_int8"]).spec == trained.spec


def test_litert_int8_gate_refuses_an_impossible_threshold(trained, tflite_int8, tmp_path):
    import dataclasses
    import shutil

    from lightning_cls.export.errors import AccuracyDropError

    path, _ = tflite_int8
    copy = shutil.copy(path, tmp_path / path.name)  # the gate removes a refused file
    writer = FORMATS.create("litert_int8")
    writer.quantize = dataclasses.replace(writer.quantize, latency_runs=0, max_acc_drop=-100)
    splits = trained.data.splits
    writer.bind(
        {"litert": path.parent / "model.tflite"}, ExportData(splits["train"], splits["val"])
    )
    run, _ = writer.read_back(Path(copy))
    with pytest.raises(AccuracyDropError, match=r"litert_pt2e_int8 lost .* the allowed -100"):
        writer.check(None, run, trained.spec, Path(copy), (1,), 0, 0)
    assert not writer.report.accepted and not Path(copy).exists()


@pytest.fixture(scope="module")
def mlpackage(trained, tmp_path_factory):
    pytest.importorskip("coremltools")
    path = tmp_path_factory.mktemp("coreml") / "model.mlpackage"
    return export_format("coreml", trained.net, trained.spec, path)


def test_coreml_spec_declares_the_image_input_labels_and_preprocessing(trained, mlpackage):
    from lightning_cls.export.coreml import read_coreml

    found = read_coreml(mlpackage)
    spec = trained.spec
    assert (found.input_name, found.color_space, found.size) == ("image", "RGB", (16, 16))
    assert found.outputs == ["classLabel", "classLabel_probs"]
    assert found.classes == list(spec.classes)
    assert found.scale == pytest.approx(1 / 255)
    assert found.bias == pytest.approx([-m for m in spec.mean])
    assert found.spec == spec  # every metadata field, as ONNX carries it


def test_coreml_check_names_what_the_file_declares_otherwise(trained, mlpackage):
    from dataclasses import replace

    from lightning_cls.export.coreml import CoreMLWriter, read_coreml
    from lightning_cls.export.errors import ExportCheckError

    other = replace(trained.spec, classes=("w", "x", "y", "z"))
    with pytest.raises(ExportCheckError, match=r"declares class labels \['.*'\], not \['w'"):
        CoreMLWriter().check_spec(read_coreml(mlpackage), other, mlpackage)


@pytest.mark.skipif(sys.platform == "darwin", reason="Core ML predicts on macOS")
def test_coreml_predict_on_linux_is_one_line_naming_macos(mlpackage):
    with pytest.raises(OSError, match=r"runs on macOS only .*predict here with model\.onnx"):
        open_runtime(mlpackage)


def test_a_format_whose_extra_is_missing_is_one_line_naming_it(monkeypatch):
    from lightning_cls.export.exporter import ExportConfig

    monkeypatch.setitem(sys.modules, "executorch", None)  # as if the extra were not installed
    with pytest.raises(
        ValueError,
        match=r"^export=executorch: .* needs executorch: pip install 'lightning_cls\[executorch\]'\.$",
    ):
        ExportConfig(formats=["executorch"])


def test_export_all_takes_the_installed_and_names_the_skipped(monkeypatch, caplog):
    from lightning_cls.export import litert
    from lightning_cls.export.exporter import ExportConfig

    monkeypatch.setitem(sys.modules, "coremltools", None)
    monkeypatch.setattr(litert, "converter_python", lambda: None)
    with caplog.at_level("WARNING"):
        formats = ExportConfig(formats=["all"]).formats
    assert formats == ["onnx", "torchscript", "pt2", "executorch"]
    assert "export=all skips litert: LiteRT converts with litert-torch" in caplog.text
    assert "export=all skips coreml: Core ML needs coremltools: pip install" in caplog.text


def with_rule(spec, score: str):
    """``spec`` with a fitted feature-space rule (random features: Core ML refuses it before
    looking at them)."""
    import numpy as np

    from lightning_cls.inference import InputSpec, feature_rules

    features, labels = np.random.default_rng(0).normal(size=(8, 4)), np.arange(8) % 2
    rule = {"score": score, "threshold": 0.5, "keep": 0.95}
    rule |= feature_rules.fit(score, features, labels, **({"k": 2} if score == "knn" else {}))
    return InputSpec.from_dict({**spec.to_dict(), "reject": rule})


@pytest.mark.parametrize("score", ["knn", "mahalanobis"])
def test_coreml_refuses_a_feature_space_rule_naming_the_fix(trained, tmp_path, score):
    """A Core ML classifier has no features output: it would answer without the rule."""
    pytest.importorskip("coremltools")
    spec = with_rule(trained.spec, score)
    with pytest.raises(
        ValueError,
        match=rf"^export=coreml: reject={score} scores the network's features, which "
        r"export=coreml does not carry .*; calibrate with reject=msp or reject=energy for "
        r"Core ML, or use export=onnx\|executorch\|litert, which carry the features\.$",
    ):
        export_format("coreml", trained.net, spec, tmp_path / "model.mlpackage")
    assert not list(tmp_path.iterdir())  # nothing written


def test_an_export_with_coreml_is_refused_before_any_file_for_a_feature_rule(trained, tmp_path):
    pytest.importorskip("coremltools")
    from lightning_cls.export.exporter import ExportConfig, export_model

    spec = with_rule(trained.spec, "knn")
    config = ExportConfig(formats=["onnx", "coreml"])
    with pytest.raises(ValueError, match=r"^export=coreml: reject=knn scores the network's"):
        export_model(trained.net, spec, tmp_path / "out", config)
    assert not (tmp_path / "out").exists()  # refused before model.onnx, not after


def test_export_all_skips_coreml_for_a_feature_rule_and_says_why(trained, monkeypatch, caplog):
    pytest.importorskip("coremltools")
    from lightning_cls.export import litert
    from lightning_cls.export.exporter import ExportConfig, accepted

    monkeypatch.setattr(litert, "converter_python", lambda: None)
    config = ExportConfig(formats=["all"])
    spec = with_rule(trained.spec, "knn")
    with caplog.at_level("WARNING"):
        kept = [w.key for w in accepted(config.writers(), spec, config)]
    assert "coreml" not in kept and "executorch" in kept and "onnx" in kept
    assert "export=all skips coreml: reject=knn scores the network's features" in caplog.text
    plain = [w.key for w in accepted(config.writers(), trained.spec, config)]
    assert "coreml" in plain  # a model without a feature rule keeps its Core ML file


def test_coreml_refuses_an_energy_rule_naming_the_fix(trained, tmp_path):
    """Core ML answers probabilities; its runtime's logits (log-probabilities x T) give every
    image the same energy, so reject=energy would never (or always) answer unknown."""
    pytest.importorskip("coremltools")
    from lightning_cls.inference import InputSpec

    rule = {"score": "energy", "threshold": 1.0, "keep": 0.95}
    spec = InputSpec.from_dict({**trained.spec.to_dict(), "reject": rule})
    with pytest.raises(
        ValueError,
        match=r"^export=coreml: reject=energy scores the logits, which a Core ML classifier "
        r"does not give back .*; calibrate with reject=msp for Core ML, or use "
        r"export=onnx\|executorch\|litert\.$",
    ):
        export_format("coreml", trained.net, spec, tmp_path / "model.mlpackage")
    assert not list(tmp_path.iterdir())  # nothing written
