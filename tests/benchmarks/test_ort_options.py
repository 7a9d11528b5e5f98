"""benchmarks/ort_options.py --quick: every session-option variant runs and is paired."""

from __future__ import annotations

import pytest

pytest.importorskip("onnxruntime")

VARIANTS = ("basic", "extended", "no_spin", "affinity", "daz")


def test_quick_run_times_every_variant_against_the_shipped_session(run_quick):
    out = run_quick("ort_options.py", "--models", "simplecnn", timeout=300)
    res = out["simplecnn"]
    assert len(res["rounds"]) == out["rounds"] == 2
    for row in res["rounds"]:
        for v in ("shipped", *VARIANTS):
            assert row[f"{v}_img_s"] > 0 and row[f"{v}_p50_ms"] > 0
    for v in VARIANTS:
        for kind in ("throughput", "latency"):
            ratio = res[f"{v}_{kind}_vs_shipped"]
            assert len(ratio["per_round"]) == 2
            assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]


def test_unknown_variant_is_named(benchmark_module, tmp_path):
    ort_options = benchmark_module("ort_options")
    with pytest.raises(ValueError, match="Unknown variant 'fast'; use one of shipped, basic"):
        ort_options.session(tmp_path / "m.onnx", "fast", 1)
