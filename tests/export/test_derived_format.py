"""A derived, INT8-style format through the registry alone: a plug-in "quantizer" that writes
``model_rounded.onnx`` from ``model.onnx`` (every float weight rounded), gated on validation
accuracy like ``export=int8``'s files.

Nothing in ``exporter.py``, ``int8.py`` or a config names it: one ``Int8Writer`` subclass that
declares its source and one ``register_format`` call, and ``ExportConfig`` knows it needs the
ONNX file and data (from the writer's declarations) while ``export_model`` orders it after
ONNX, hands it the data, writes it under a temp name, gates it against its source and reports
it. The negative control rounds the weights to integers: the gate refuses it and nothing is
left at its name.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from lightning_cls.export import FORMATS, register_format
from lightning_cls.export.errors import AccuracyDropError
from lightning_cls.export.exporter import REPORT_FILE, ExportConfig, export_model
from lightning_cls.export.int8 import Int8Writer
from lightning_cls.fileio import is_temp_file
from lightning_cls.inference import load_artifact


class RoundedOnnx(Int8Writer):
    """``model_rounded.onnx``: ``model.onnx`` with every float weight rounded to ``decimals``."""

    key, file, title, method = "onnx_rounded", "model_rounded.onnx", "rounded ONNX", "rounded"
    requires, uses = ("onnx",), "onnx_rounded rounds the ONNX file's weights"
    modules = ("onnx", "onnxruntime")
    decimals = 2
    seen: list = []  # the calibration split each write got (the fixture gives a fresh list)

    def write(self, net, example, tmp, spec):
        import onnx
        from onnx import numpy_helper

        self.seen.append(self.data.train)
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
def rounded_format(monkeypatch):
    monkeypatch.setattr(RoundedOnnx, "seen", [])
    register_format("onnx_rounded", RoundedOnnx)
    try:
        yield RoundedOnnx.seen
    finally:
        FORMATS.pop("onnx_rounded")


def test_a_registered_derived_format_is_written_gated_and_reported(
    trained, tmp_path, rounded_format
):
    # ordered by what it requires; a subclass of Int8Writer: the INT8 options are its own
    config = ExportConfig(formats=["onnx_rounded", "onnx"], int8={"latency_runs": 0})
    result = export_model(trained.net, trained.spec, tmp_path, config, trained.data)
    assert list(result.paths) == ["onnx", "onnx_rounded"]
    assert result.paths["onnx_rounded"] == tmp_path / "model_rounded.onnx"
    assert rounded_format == [trained.data.splits["train"]]  # the data reached its write
    (report,) = result.reports
    assert report.method == "rounded" and report.accepted and report.drop_points <= 1.0
    rounded = load_artifact(result.paths["onnx_rounded"])  # served by the .onnx runtime
    assert rounded.spec == trained.spec
    val = trained.data.splits["val"]
    assert rounded.accuracy(val.images, val.labels) == pytest.approx(report.acc_after)
    saved = json.loads((tmp_path / REPORT_FILE).read_text())
    assert [(r["method"], r["accepted"]) for r in saved] == [("rounded", True)]


def test_the_gate_refuses_a_derived_file_that_loses_accuracy(trained, tmp_path, rounded_format):
    FORMATS.pop("onnx_rounded")
    register_format("onnx_rounded", ZeroedOnnx)
    (tmp_path / "model_rounded.onnx").write_bytes(b"an older file, from another model")
    config = ExportConfig(formats=["onnx", "onnx_rounded"], int8={"latency_runs": 0})
    with pytest.raises(AccuracyDropError, match=r"rounded lost .* points .* Deleted"):
        export_model(trained.net, trained.spec, tmp_path, config, trained.data)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["meta.json", "model.onnx", REPORT_FILE]  # no stale file, no temp file
    assert not any(is_temp_file(n) for n in names)
    (saved,) = json.loads((tmp_path / REPORT_FILE).read_text())
    assert saved["method"] == "rounded" and saved["accepted"] is False
    assert "Deleted" in saved["error"]


def test_a_derived_format_names_its_source_and_its_data(trained, tmp_path, rounded_format):
    with pytest.raises(
        ValueError,
        match=r"onnx_rounded rounds the ONNX file's weights, but 'onnx' is not in "
        r"export.formats=\['onnx_rounded'\]; add it",
    ):
        ExportConfig(formats=["onnx_rounded"])
    config = ExportConfig(formats=["onnx", "onnx_rounded"])
    assert config.needs_data and not ExportConfig(formats=["onnx"]).needs_data
    with pytest.raises(ValueError, match="calibrates on the train split .* needs a DataModule"):
        export_model(trained.net, trained.spec, tmp_path, config)
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []  # refused before any work
    assert rounded_format == []  # nothing was written
