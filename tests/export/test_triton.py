"""export=triton: a model repository whose config.pbtxt Triton's own ModelConfig proto parses.

The schema is Triton's compiled ``model_config_pb2`` from the ``tritonclient`` wheel (the
``dev`` extra installs it). ``tritonclient.grpc`` needs grpcio on import; the generated module
itself needs only protobuf, so it is loaded from its file when grpc support is absent.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from lightning_cls.export.exporter import ExportConfig, export_model
from lightning_cls.export.triton import TritonConfig, export_triton


def _model_config_pb2():
    import tritonclient

    try:
        from tritonclient.grpc import model_config_pb2
    except (ImportError, RuntimeError):  # "does not include grpc support"
        path = Path(tritonclient.__file__).parent / "grpc" / "model_config_pb2.py"
        spec = importlib.util.spec_from_file_location("triton_model_config_pb2", path)
        model_config_pb2 = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(model_config_pb2)
    return model_config_pb2


def parse_model_config(path: Path):
    """``config.pbtxt`` parsed strictly (unknown fields and bad enums raise) as Triton does."""
    from google.protobuf import text_format

    return text_format.Parse(path.read_text(), _model_config_pb2().ModelConfig())


def test_default_repository_batches_without_waiting_on_cpu_instances(trained, tmp_path):
    """Triton's guidance: no preferred_batch_size, no queue delay; KIND_CPU instances."""
    paths = export_model(trained.net, trained.spec, tmp_path, ExportConfig(["onnx", "triton"]))
    repo = paths.paths["triton"]
    text = (repo / "config.pbtxt").read_text()
    assert "preferred_batch_size" not in text
    parsed = parse_model_config(repo / "config.pbtxt")
    assert parsed.WhichOneof("scheduling_choice") == "dynamic_batching"
    assert list(parsed.dynamic_batching.preferred_batch_size) == []
    assert parsed.dynamic_batching.max_queue_delay_microseconds == 0
    (group,) = parsed.instance_group
    assert group.kind == group.KIND_CPU and group.count == 1


def test_triton_repository_parses_as_triton_model_config(trained, tmp_path):
    pb2 = _model_config_pb2()
    with pytest.raises(ValueError, match=r"Triton repository serves the onnx file .* but 'onnx'"):
        ExportConfig(formats=["triton"])
    triton = {"model_name": "digits", "max_batch_size": 32, "instances": 2}
    config = ExportConfig(formats=["onnx", "triton"], triton=triton)
    paths = export_model(trained.net, trained.spec, tmp_path, config).paths
    assert set(paths) == {"onnx", "triton"}
    repo = paths["triton"]
    assert repo == tmp_path / "triton" / "digits"
    assert (repo / "1" / "model.onnx").read_bytes() == paths["onnx"].read_bytes()
    assert (repo / "labels.txt").read_text().split() == list(trained.spec.classes)
    parsed = parse_model_config(repo / "config.pbtxt")
    assert parsed.name == "digits" and parsed.platform == "onnxruntime_onnx"
    assert parsed.max_batch_size == 32
    (inp,), (out,) = parsed.input, parsed.output
    assert inp.name == "input" and list(inp.dims) == list(trained.spec.input_shape)
    assert inp.data_type == pb2.TYPE_FP32 and inp.format == inp.FORMAT_NCHW
    assert out.name == "logits" and list(out.dims) == [trained.spec.num_classes]
    assert out.label_filename == "labels.txt"
    assert parsed.instance_group[0].count == 2


def test_triton_repository_can_serve_the_end_to_end_model(trained, tmp_path):
    """export=triton_e2e: uint8 NHWC pixels in, probabilities out, labels for top-k."""
    pb2 = _model_config_pb2()
    with pytest.raises(ValueError, match=r"serves the onnx_e2e file .* add it"):
        ExportConfig(formats=["onnx", "triton"], triton={"source": "onnx_e2e"})
    config = ExportConfig(formats=["onnx_e2e", "triton"], triton={"source": "onnx_e2e"})
    paths = export_model(trained.net, trained.spec, tmp_path, config).paths
    assert set(paths) == {"onnx_e2e", "triton"}
    repo = paths["triton"]
    assert (repo / "1" / "model.onnx").read_bytes() == paths["onnx_e2e"].read_bytes()
    parsed = parse_model_config(repo / "config.pbtxt")
    (inp,), (out,) = parsed.input, parsed.output
    size, channels = trained.spec.image_size, trained.spec.num_channels
    assert inp.name == "images" and inp.data_type == pb2.TYPE_UINT8
    assert list(inp.dims) == [size, size, channels] and inp.format == inp.FORMAT_NHWC
    assert out.name == "probabilities" and out.data_type == pb2.TYPE_FP32
    assert list(out.dims) == [trained.spec.num_classes] and out.label_filename == "labels.txt"
    assert parsed.dynamic_batching.max_queue_delay_microseconds == 0


def test_triton_needs_a_dynamic_batch_axis_and_sane_settings(trained, tmp_path):
    import onnx

    path = export_model(trained.net, trained.spec, tmp_path, ExportConfig(formats=["onnx"]))
    model = onnx.load(str(path.paths["onnx"]))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1  # a fixed batch of 1
    fixed = tmp_path / "fixed.onnx"
    onnx.save(model, str(fixed))
    with pytest.raises(ValueError, match=r"ONNX input 'input' has no dynamic batch axis"):
        export_triton(fixed, tmp_path / "repo", trained.spec)
    with pytest.raises(ValueError, match=r"export\.triton\.source='pt2' is not an ONNX export"):
        TritonConfig(source="pt2")
    with pytest.raises(ValueError, match=r"export\.triton\.instances=0 must be >= 1"):
        TritonConfig(instances=0)
    with pytest.raises(ValueError, match=r"export\.triton\.max_queue_delay_us=-1 must be >= 0"):
        TritonConfig(max_queue_delay_us=-1)


def test_parser_rejects_what_triton_would_reject(tmp_path):
    """The schema check is real: a misspelt field or an unknown instance kind fails to parse."""
    from google.protobuf import text_format

    bad = tmp_path / "config.pbtxt"
    bad.write_text('name: "m"\ndynamic_batching { prefered_batch_size: [ 4 ] }\n')
    with pytest.raises(text_format.ParseError, match="prefered_batch_size"):
        parse_model_config(bad)
    bad.write_text('name: "m"\ninstance_group [ { kind: KIND_TPU } ]\n')
    with pytest.raises(text_format.ParseError, match="KIND_TPU"):
        parse_model_config(bad)
