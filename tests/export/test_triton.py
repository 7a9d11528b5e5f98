"""export=triton: a model repository whose config.pbtxt Triton's own ModelConfig proto parses."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from lightning_cls.export.exporter import ExportConfig, export_model
from lightning_cls.export.triton import TritonConfig, export_triton


def _model_config_class():
    """Triton's ``ModelConfig`` message from the tritonclient wheel. Its ``tritonclient.grpc``
    package imports grpcio on import; the generated module itself needs only protobuf."""
    tritonclient = pytest.importorskip("tritonclient")
    try:
        from tritonclient.grpc import model_config_pb2
    except (ImportError, RuntimeError):  # "does not include grpc support"
        path = Path(tritonclient.__file__).parent / "grpc" / "model_config_pb2.py"
        spec = importlib.util.spec_from_file_location("triton_model_config_pb2", path)
        model_config_pb2 = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(model_config_pb2)
    return model_config_pb2.ModelConfig


def test_triton_repository_parses_as_triton_model_config(trained, tmp_path):
    from google.protobuf import text_format

    with pytest.raises(ValueError, match=r"Triton repository serves the ONNX file, but 'onnx'"):
        ExportConfig(formats=["triton"])
    config = ExportConfig(formats=["onnx", "triton"])
    config.triton = TritonConfig(
        model_name="digits", max_batch_size=32, preferred_batch_sizes=[4, 16]
    )
    paths = export_model(trained.net, trained.spec, tmp_path, config).paths
    assert set(paths) == {"onnx", "triton"}
    repo = paths["triton"]
    assert (repo / "1" / "model.onnx").read_bytes() == paths["onnx"].read_bytes()
    assert (repo / "labels.txt").read_text().split() == list(trained.spec.classes)
    parsed = text_format.Parse((repo / "config.pbtxt").read_text(), _model_config_class()())
    assert parsed.name == "digits" and parsed.platform == "onnxruntime_onnx"
    assert parsed.max_batch_size == 32
    (inp,), (out,) = parsed.input, parsed.output
    assert inp.name == "input" and list(inp.dims) == list(trained.spec.input_shape)
    assert out.name == "logits" and list(out.dims) == [trained.spec.num_classes]
    assert out.label_filename == "labels.txt"
    assert list(parsed.dynamic_batching.preferred_batch_size) == [4, 16]
    assert parsed.dynamic_batching.max_queue_delay_microseconds == 2000
    assert parsed.instance_group[0].kind == parsed.instance_group[0].KIND_CPU


def test_triton_needs_a_dynamic_batch_axis_and_sane_batch_sizes(trained, tmp_path):
    import onnx

    path = export_model(trained.net, trained.spec, tmp_path, ExportConfig(formats=["onnx"]))
    model = onnx.load(str(path.paths["onnx"]))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1  # a fixed batch of 1
    fixed = tmp_path / "fixed.onnx"
    onnx.save(model, str(fixed))
    with pytest.raises(ValueError, match=r"ONNX input 'input' has no dynamic batch axis"):
        export_triton(fixed, tmp_path / "repo", trained.spec)
    with pytest.raises(ValueError, match=r"preferred_batch_sizes \[64\] must lie in 1\.\.32"):
        TritonConfig(max_batch_size=32, preferred_batch_sizes=[64])
