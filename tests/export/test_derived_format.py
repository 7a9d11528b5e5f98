"""A derived, INT8-style format through the registry alone: a file made from ``model.onnx``
(its weights rounded), gated on validation accuracy like ``export=int8``'s files.

Nothing in ``exporter.py``, ``int8.py`` or a config names it: one ``Int8Writer`` subclass that
declares its source and one ``register_format`` call, and ``export_model`` orders it after
ONNX, hands it the data, writes it under a temp name, gates it and reports it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from lightning_cls.export import FORMATS, register_format
from lightning_cls.export.errors import AccuracyDropError
from lightning_cls.export.exporter import ExportConfig, export_model
from lightning_cls.export.int8 import Int8Writer
from lightning_cls.fileio import is_temp_file
from lightning_cls.inference import load_artifact


class RoundedOnnx(Int8Writer):
    """``model_rounded.onnx``: ``model.onnx`` with every float weight rounded to ``decimals``."""

    key, file, title, method = "onnx_rounded", "model_rounded.onnx", "rounded ONNX", "rounded"
    requires, uses = ("onnx",), "onnx_rounded rounds the ONNX file's weights"
    modules = ("onnx", "onnxruntime")
    decimals = 2

    def write(self, net, example, tmp, spec):
        import onnx
        from onnx import numpy_helper

        model = onnx.load(str(self.source_path))  # its metadata_props (the spec) come along
        for weight in model.graph.initializer:
            array = numpy_helper.to_array(weight)
            if array.dtype.kind == "f":
                rounded = np.round(array, self.decimals).astype(array.dtype)
                weight.CopyFrom(numpy_helper.from_array(rounded, weight.name))
        onnx.save_model(model, str(tmp))


class ZeroedOnnx(RoundedOnnx):
    """Negative control: rounded to integers, the tiny network's weights are mostly zero."""

    decimals = 0


@pytest.fixture
def rounded_format():
    register_format("onnx_rounded", RoundedOnnx)
    try:
        yield
    finally:
        FORMATS.pop("onnx_rounded")


def test_a_registered_derived_format_is_written_gated_and_reported(
    trained, tmp_path, rounded_format
):
    config = ExportConfig(formats=["onnx_rounded", "onnx"])  # ordered by what it requires
    config.quantize.latency_runs = 0
    result = export_model(trained.net, trained.spec, tmp_path, config, trained.data)
    assert list(result.paths) == ["onnx", "onnx_rounded"]
    (report,) = result.reports
    assert report.method == "rounded" and report.accepted and report.drop_points <= 1.0
    rounded = load_artifact(result.paths["onnx_rounded"])  # served by the .onnx runtime
    assert rounded.spec == trained.spec
    val = trained.data.splits["val"]
    assert rounded.accuracy(val.images, val.labels) == pytest.approx(report.acc_after)
    saved = json.loads((tmp_path / "quantization_report.json").read_text())
    assert [r["method"] for r in saved] == ["rounded"]


def test_the_gate_refuses_a_derived_file_that_loses_accuracy(trained, tmp_path, rounded_format):
    FORMATS.pop("onnx_rounded")
    register_format("onnx_rounded", ZeroedOnnx)
    (tmp_path / "model_rounded.onnx").write_bytes(b"an older file, from another model")
    config = ExportConfig(formats=["onnx", "onnx_rounded"])
    config.quantize.latency_runs = 0
    with pytest.raises(AccuracyDropError, match=r"rounded lost .* points .* Deleted"):
        export_model(trained.net, trained.spec, tmp_path, config, trained.data)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["meta.json", "model.onnx", "quantization_report.json"]
    assert not any(is_temp_file(n) for n in names)
    (saved,) = json.loads((tmp_path / "quantization_report.json").read_text())
    assert saved["method"] == "rounded" and saved["accepted"] is False


def test_a_derived_format_names_its_source_and_its_data(trained, tmp_path, rounded_format):
    with pytest.raises(
        ValueError,
        match=r"onnx_rounded rounds the ONNX file's weights, but 'onnx' is not in "
        r"export.formats=\['onnx_rounded'\]; add it",
    ):
        ExportConfig(formats=["onnx_rounded"])
    config = ExportConfig(formats=["onnx", "onnx_rounded"])
    assert config.needs_data
    with pytest.raises(ValueError, match="calibrates on the train split .* needs a DataModule"):
        export_model(trained.net, trained.spec, tmp_path, config)
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []  # refused before any work
