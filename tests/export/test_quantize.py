"""INT8: static ORT quantization keeps accuracy; the threshold failure path is loud."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from lightning_cls.export.exporter import ExportConfig, export_model
from lightning_cls.export.quantize import (
    AccuracyDropError,
    QuantizationReport,
    enforce_max_drop,
    quantize_torch_dynamic,
)
from lightning_cls.inference import load_artifact


def test_static_int8_keeps_accuracy_within_threshold(trained, tmp_path):
    config = ExportConfig(
        formats=["onnx", "onnx_int8"], int8={"calibration_batches": 4, "latency_runs": 5}
    )
    result = export_model(trained.net, trained.spec, tmp_path, config, datamodule=trained.data)
    (report,) = result.reports
    assert report.acc_before > 0.9, "the tiny model should have learned the synthetic task"
    assert report.drop_points <= 1.0
    assert report.size_after < report.size_before
    int8 = load_artifact(result.paths["onnx_int8"])
    assert int8.spec == trained.spec  # metadata survives quantization
    assert _conv_weight_dequantized(result.paths["onnx_int8"]) == [False, True]  # stem float
    val = trained.data.splits["val"]
    assert int8.accuracy(val.images, val.labels) == pytest.approx(report.acc_after)
    saved = json.loads((tmp_path / "quantization_report.json").read_text())
    assert saved[0]["method"] == "onnx_static_int8" and saved[0]["drop_points"] <= 1.0


def test_dynamic_int8_touches_only_linear(trained, tmp_path):
    config = ExportConfig(formats=["torchscript_int8_dynamic"], int8={"latency_runs": 5})
    result = export_model(trained.net, trained.spec, tmp_path, config, datamodule=trained.data)
    (report,) = result.reports
    assert report.method == "torch_dynamic_int8"
    assert report.drop_points <= 1.0
    assert (
        result.paths["torchscript_int8_dynamic"].stat().st_size
        < result.paths["torchscript_trace"].stat().st_size
    )


def test_dynamic_quantization_leaves_conv_fp32(trained):
    qnet = quantize_torch_dynamic(trained.net)
    dynamic_linear = torch.ao.nn.quantized.dynamic.Linear
    assert sum(isinstance(m, dynamic_linear) for m in qnet.modules()) == 2
    assert sum(type(m) is nn.Linear for m in qnet.modules()) == 0
    assert sum(type(m) is nn.Conv2d for m in qnet.modules()) == 2  # untouched, still fp32
    assert sum(type(m) is nn.Linear for m in trained.net.modules()) == 2  # original not modified


def test_threshold_failure_deletes_the_file_and_raises(tmp_path):
    int8 = tmp_path / "model_int8.onnx"
    int8.write_bytes(b"x")
    report = QuantizationReport(
        "onnx_static_int8", "fp32.onnx", str(int8), 0.9, 0.85, 100, 30, 1.0, 0.5
    )
    with pytest.raises(
        AccuracyDropError,
        match=r"lost 5\.00 accuracy points .* more than the allowed 1\. .*force=true",
    ):
        enforce_max_drop(report, max_drop_points=1.0)
    assert not int8.exists()


def test_force_keeps_the_file(tmp_path, caplog):
    int8 = tmp_path / "model_int8.onnx"
    int8.write_bytes(b"x")
    report = QuantizationReport(
        "onnx_static_int8", "fp32.onnx", str(int8), 0.9, 0.85, 100, 30, 1.0, 0.5
    )
    enforce_max_drop(report, max_drop_points=1.0, force=True)
    assert int8.exists()
    assert "Keeping" in caplog.text


def test_static_needs_onnx_in_formats():
    with pytest.raises(ValueError, match=r"'onnx' is not in export.formats=\['pt2', 'onnx_int8'\]"):
        ExportConfig(formats=["pt2", "onnx_int8"])


def test_quantization_needs_data(trained, tmp_path):
    config = ExportConfig(formats=["onnx", "onnx_int8"])
    with pytest.raises(ValueError, match="needs a DataModule; pass data=<name>"):
        export_model(trained.net, trained.spec, tmp_path, config, datamodule=None)


def test_static_int8_of_airbench_the_cifar10_fast_net(trained, tmp_path):
    """ORT's symbolic shape inference fails on airbench's ONNX graph (a TypeError in
    _infer_Reshape): the pre-processing retries without it, so export=int8 of
    experiment=cifar10_fast writes its file instead of stopping."""
    from lightning_cls.models import create_model

    spec = trained.spec
    net = create_model(
        "airbench",
        num_classes=spec.num_classes,
        in_channels=spec.num_channels,
        image_size=spec.image_size,
        widths=(8, 8, 8),
        stem_width=4,
        whiten=True,
    ).eval()
    config = ExportConfig(
        formats=["onnx", "onnx_int8"],
        int8={"calibration_batches": 2, "latency_runs": 1, "force": True},
    )
    result = export_model(net, spec, tmp_path, config, datamodule=trained.data)
    int8 = load_artifact(result.paths["onnx_int8"])
    images = trained.data.splits["val"].images[:8]
    assert int8.predict_images(images).shape == (8, spec.num_classes)


def _conv_weight_dequantized(path) -> list[bool]:
    """For each Conv of the ONNX graph at ``path``, in graph order: is its weight the output
    of a DequantizeLinear (an int8 weight), or a float initializer?"""
    import onnx

    graph = onnx.load(str(path)).graph
    dequantized = {out for n in graph.node if n.op_type == "DequantizeLinear" for out in n.output}
    return [n.input[1] in dequantized for n in graph.node if n.op_type == "Conv"]


@pytest.mark.parametrize("keep", [True, False])
def test_static_int8_keeps_the_first_conv_float(trained, tmp_path, keep):
    """keep_first_conv_float (default on) leaves the stem's weight float; off (the negative
    control) it is int8 like every later Conv."""
    from lightning_cls.export import export_format
    from lightning_cls.export.quantize import SplitCalibrationReader, quantize_onnx_static

    fp32 = export_format("onnx", trained.net, trained.spec, tmp_path / "model.onnx")
    reader = SplitCalibrationReader(trained.data.splits["train"], trained.spec, 1, 16)
    int8 = quantize_onnx_static(fp32, tmp_path / "q.onnx", reader, keep_first_conv_float=keep)
    weights = _conv_weight_dequantized(int8)
    assert len(weights) == 2, weights  # the tiny net's two convolutions
    assert weights == [not keep, True]


def test_export_passes_keep_first_conv_float_to_the_static_writer(trained, tmp_path):
    """export.int8.keep_first_conv_float=false reaches quantize_onnx_static (whose own
    default is on): the stem is int8 too."""
    int8 = {"calibration_batches": 1, "latency_runs": 0, "keep_first_conv_float": False}
    config = ExportConfig(formats=["onnx", "onnx_int8"], int8=int8)
    result = export_model(trained.net, trained.spec, tmp_path, config, datamodule=trained.data)
    assert _conv_weight_dequantized(result.paths["onnx_int8"]) == [True, True]
