"""An INT8-style derived format through the registry alone: a plug-in "quantizer" that writes
``model_rounded.onnx`` from ``model.onnx`` (every float weight rounded), gated like INT8.

Nothing in ``exporter.py`` or ``int8.py`` names it, yet ``ExportConfig`` knows it needs the
ONNX file and data (from the writer's declarations) and ``export_model`` writes it through the
one skeleton: calibration data handed to ``write``, the file measured on the validation split
under its temp name against its source, renamed only if it passes the gate. The negative
control rounds every weight to 0: the gate refuses it and nothing is left at its name.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from lightning_cls.export import FORMATS, register_format
from lightning_cls.export.errors import AccuracyDropError
from lightning_cls.export.exporter import REPORT_FILE, ExportConfig, export_model
from lightning_cls.export.int8 import Calibration, Gate, Int8Writer
from lightning_cls.fileio import is_temp_file
from lightning_cls.inference import load_artifact


class RoundedOnnxWriter(Int8Writer):
    """``model_rounded.onnx``: ``model.onnx`` with each float weight rounded to ``decimals``."""

    key, file, title, source, method = (
        "onnx_rounded",
        "model_rounded.onnx",
        "rounded ONNX",
        "onnx",
        "onnx_rounded",
    )

    def __init__(self, source_path, gate, decimals: int):
        super().__init__(source_path, gate, Calibration())
        self.decimals, self.seen = decimals, []  # the calibration split each write got

    def write(self, net, example, tmp, spec, data):
        import onnx
        from onnx import numpy_helper

        self.seen.append(data["train"])
        model = onnx.load(str(self.source_path))
        for init in model.graph.initializer:
            array = numpy_helper.to_array(init)
            if array.dtype.kind == "f":
                rounded = np.round(array, self.decimals).astype(array.dtype)
                init.CopyFrom(numpy_helper.from_array(rounded, init.name))
        onnx.save_model(model, str(tmp), save_as_external_data=False)


@pytest.fixture
def rounded_format():
    """Register ``onnx_rounded`` (its writer rounds to ``writers["decimals"]``)."""
    made = {"decimals": 2, "writers": []}

    def writers(config, out):
        gate = Gate(config.quantize.max_acc_drop, config.quantize.force, latency_runs=0)
        made["writers"].append(RoundedOnnxWriter(out / "model.onnx", gate, made["decimals"]))
        return made["writers"][-1:]

    register_format("onnx_rounded", writers)
    try:
        yield made
    finally:
        FORMATS.pop("onnx_rounded")


def test_a_derived_format_declares_its_source_and_data(rounded_format, trained, tmp_path):
    with pytest.raises(
        ValueError,
        match=r"'onnx_rounded' in export.formats makes rounded ONNX from the onnx file, but "
        r"'onnx' is not in export.formats=\['onnx_rounded'\]",
    ):
        ExportConfig(formats=["onnx_rounded"])
    config = ExportConfig(formats=["onnx_rounded", "onnx"])
    assert config.needs_data and not ExportConfig(formats=["onnx"]).needs_data
    with pytest.raises(ValueError, match=r"rounded ONNX calibrate\(s\) .* needs a DataModule"):
        export_model(trained.net, trained.spec, tmp_path, config)
    assert not tmp_path.joinpath("model.onnx").exists()  # refused before any work


def test_a_derived_format_is_written_and_gated_through_the_skeleton(
    rounded_format, trained, tmp_path
):
    config = ExportConfig(formats=["onnx_rounded", "onnx"])  # written in FORMATS order
    result = export_model(trained.net, trained.spec, tmp_path, config, trained.data)
    path = tmp_path / "model_rounded.onnx"
    assert result.paths["onnx_rounded"] == path and result.paths["onnx"].is_file()
    (writer,) = rounded_format["writers"][-1:]
    assert writer.seen == [trained.data.splits["train"]]  # the data reached its write
    (report,) = result.reports
    assert report.method == "onnx_rounded" and report.accepted and report.drop_points <= 1.0
    val = trained.data.splits["val"]
    rounded = load_artifact(path)
    assert rounded.spec == trained.spec
    assert rounded.accuracy(val.images, val.labels) == pytest.approx(report.acc_after)
    saved = json.loads((tmp_path / REPORT_FILE).read_text())
    assert [(r["method"], r["accepted"]) for r in saved] == [("onnx_rounded", True)]


def test_the_gate_refuses_a_derived_file_that_loses_accuracy(rounded_format, trained, tmp_path):
    """Negative control: every weight rounded to 0 answers one class for every image."""
    rounded_format["decimals"] = -3
    (tmp_path / "model_rounded.onnx").write_bytes(b"an older file, from another model")
    config = ExportConfig(formats=["onnx", "onnx_rounded"])
    with pytest.raises(AccuracyDropError, match=r"onnx_rounded lost .* accuracy points"):
        export_model(trained.net, trained.spec, tmp_path, config, trained.data)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["meta.json", "model.onnx", REPORT_FILE]  # no stale file, no temp file
    assert not any(is_temp_file(n) for n in names)
    (saved,) = json.loads((tmp_path / REPORT_FILE).read_text())
    assert saved["method"] == "onnx_rounded" and not saved["accepted"]
    assert "Deleted" in saved["error"]
