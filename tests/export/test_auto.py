"""export=auto: every runtime measured here, the fastest within the accuracy gate kept."""

from __future__ import annotations

import json

import onnx
import pytest

from lightning_cls.export.auto import AutoConfig, export_auto, select
from lightning_cls.inference import load_artifact


@pytest.mark.slow
def test_auto_keeps_the_fastest_eligible_runtime_and_records_why(trained, tmp_path):
    cfg = AutoConfig(rounds=2, window_s=0.05, calibration_batches=2, threads=1)
    result = export_auto(trained.net, trained.spec, tmp_path, trained.data, cfg)
    m = result.measurements
    assert {"torchscript", "ort_fp32", "ort_int8_qdq", "ort_int8_qoperator"} <= set(m)
    eligible = [n for n, e in m.items() if e["eligible"]]
    assert result.winner == max(eligible, key=lambda n: m[n]["img_s_median"])
    assert all(len(e["img_s"]) == 2 and e["img_s_median"] > 0 for e in m.values())
    assert result.path.name.startswith("model_auto")
    winner = load_artifact(result.path)  # loads, carries the spec, predicts as well as measured
    assert winner.spec == trained.spec
    val = trained.data.splits["val"]
    assert winner.accuracy(val.images, val.labels) == pytest.approx(m[result.winner]["val_acc"])
    saved = json.loads((tmp_path / "auto_selection.json").read_text())
    assert saved["winner"] == result.winner and set(saved["candidates"]) == set(m)
    if result.path.suffix == ".onnx":  # the measurements travel inside the artifact too
        props = {p.key: p.value for p in onnx.load(str(result.path)).metadata_props}
        assert json.loads(props["auto_selection"])["winner"] == result.winner


def test_select_skips_runtimes_that_fail_the_gate():
    results = {
        "fast_but_wrong": {"val_acc": 0.80, "img_s_median": 900.0},
        "slower": {"val_acc": 0.899, "img_s_median": 500.0},
        "slowest": {"val_acc": 0.90, "img_s_median": 100.0},
    }
    assert select(results, eager_acc=0.90, max_acc_drop=1.0) == "slower"
    assert results["fast_but_wrong"]["eligible"] is False
    assert results["fast_but_wrong"]["acc_drop_points"] == pytest.approx(10.0)
    with pytest.raises(ValueError, match=r"No exported runtime kept accuracy within 0.05 points"):
        select(results, eager_acc=0.95, max_acc_drop=0.05)


def test_auto_config_rejects_bad_values():
    with pytest.raises(ValueError, match="rounds >= 1"):
        AutoConfig(rounds=0)


def test_auto_needs_data(trained, tmp_path):
    from lightning_cls.export.exporter import ExportConfig, export_model

    with pytest.raises(ValueError, match="export=auto checks each runtime's accuracy"):
        export_model(trained.net, trained.spec, tmp_path, ExportConfig(formats=["auto"]))
