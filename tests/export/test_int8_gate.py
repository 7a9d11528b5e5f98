"""One INT8 path (the ``export.int8`` writers through the one skeleton, gated by
``Int8Writer.check``) for ``export=int8`` and ``export=auto``: the file is measured under a
temp name, gated, and only then given its final name."""

from __future__ import annotations

import json

import pytest

from lightning_cls.export.auto import AutoConfig, export_auto
from lightning_cls.export.exporter import ExportConfig, export_model
from lightning_cls.export.int8 import Int8Writer
from lightning_cls.export.quantize import AccuracyDropError
from lightning_cls.fileio import is_temp_file
from lightning_cls.inference.predictor import Predictor


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_int8_is_measured_under_a_temp_name_before_it_gets_its_final_name(
    trained, tmp_path, monkeypatch
):
    final = tmp_path / "model_int8.onnx"
    measured = []
    real_accuracy = Predictor.accuracy

    def spying_accuracy(self, images, labels, batch_size=256):
        measured.append((self.path.name, final.exists()))
        return real_accuracy(self, images, labels, batch_size)

    monkeypatch.setattr(Predictor, "accuracy", spying_accuracy)
    config = ExportConfig(
        formats=["onnx", "onnx_int8"], int8={"calibration_batches": 2, "latency_runs": 2}
    )
    result = export_model(trained.net, trained.spec, tmp_path, config, trained.data)
    int8_calls = [(name, existed) for name, existed in measured if "int8" in name]
    assert int8_calls, measured
    # While its accuracy was unknown, nothing stood at model_int8.onnx.
    assert all(is_temp_file(name) and not existed for name, existed in int8_calls), int8_calls
    assert result.paths["onnx_int8"] == final and final.is_file()
    assert not any(is_temp_file(n) for n in _names(tmp_path))


def test_a_rejected_int8_leaves_nothing_at_its_final_name(trained, tmp_path):
    (tmp_path / "model_int8.onnx").write_bytes(b"an older int8 file, from another model")
    config = ExportConfig(
        formats=["onnx", "openvino", "onnx_int8", "openvino_int8"],
        int8={"calibration_batches": 2, "latency_runs": 0, "max_acc_drop": -100},
    )
    with pytest.raises(AccuracyDropError, match=r"onnx_static_int8 lost .*\n.*openvino_nncf_int8"):
        export_model(trained.net, trained.spec, tmp_path, config, trained.data)
    assert _names(tmp_path) == [
        "meta.json",
        "model.bin",
        "model.onnx",
        "model.xml",
        "quantization_report.json",
    ]  # no model_int8.*: neither the stale .onnx nor a lone .bin, and no temp files
    reports = json.loads((tmp_path / "quantization_report.json").read_text())
    assert [(r["method"], r["accepted"]) for r in reports] == [
        ("onnx_static_int8", False),
        ("openvino_nncf_int8", False),
    ]
    assert "Deleted" in reports[0]["error"]


@pytest.mark.slow
def test_export_int8_and_auto_go_through_the_same_gated_path(trained, tmp_path, monkeypatch):
    calls = []
    real = Int8Writer.check

    def recording(self, *args, **kwargs):
        calls.append(self.method)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Int8Writer, "check", recording)
    config = ExportConfig(
        formats=["onnx", "onnx_int8"], int8={"calibration_batches": 2, "latency_runs": 0}
    )
    export_model(trained.net, trained.spec, tmp_path / "int8", config, trained.data)
    assert calls == ["onnx_static_int8"]
    cfg = AutoConfig(rounds=1, window_s=0.01, calibration_batches=2, threads=1, max_acc_drop=100)
    result = export_auto(trained.net, trained.spec, tmp_path / "auto", trained.data, cfg)
    int8_candidates = [n for n in result.measurements if "int8" in n]
    assert len(calls[1:]) == len(int8_candidates)
    assert {"ort_int8_qdq", "ort_int8_qoperator"} <= set(int8_candidates)
    assert calls[1:3] == ["onnx_static_int8", "onnx_static_int8"]
    assert not any(is_temp_file(n) for n in _names(tmp_path / "auto"))
