"""benchmarks/startup.py: every command case timed against ``import torch`` in the same round."""

from __future__ import annotations

import pytest

pytest.importorskip("onnxruntime")

CASES = ("train_help", "train_typo", "predict_onnx", "serve_onnx")


def test_quick_run_times_every_command_against_import_torch(run_quick, tmp_path):
    docs = tmp_path / "benchmarks.md"
    docs.write_text(
        "# Benchmarks\n\n## Start-up\n\n<!-- startup:start -->\nold\n<!-- startup:end -->\n"
    )
    out = run_quick("startup.py", "--write-docs", str(docs), timeout=600)
    assert out["rounds"] == 1 and set(out["cases"]) == {"torch", *CASES}
    for name in CASES:
        case = out["cases"][name]
        assert case["median_s"] > 0 and case["ratio"] > 0 and case["target"] <= 1.0
    # --help composes the config and never loads torch: far below import torch's footprint.
    assert out["cases"]["train_help"]["peak_mb"] < 200 < out["cases"]["torch"]["peak_mb"]
    text = docs.read_text()
    assert "old" not in text and "| predict_onnx |" in text and "startup.py --quick" in text


def test_a_ratio_is_paired_within_each_round(benchmark_module):
    startup = benchmark_module("startup")
    rounds = [
        {name: {"s": s, "mb": 1.0} for name, s in zip(("torch", *CASES), row)}
        for row in ([4.0, 1.0, 1.0, 2.0, 3.0], [8.0, 4.0, 1.0, 2.0, 4.0], [2.0, 1.0, 1.0, 2.0, 2.0])
    ]
    summary = startup.summarize(rounds)
    # train_help: 0.25, 0.5, 0.5 per round -> 0.5 (the ratio of the medians would be 1/4).
    assert summary["train_help"]["ratio"] == 0.5 and summary["torch"]["median_s"] == 4.0
    assert summary["serve_onnx"]["ratio"] == 0.75 and summary["serve_onnx"]["target"] == 1.0
