"""benchmarks/ood.py and benchmarks/reject_cost.py --quick: the unknowns benchmark scores every
rule on every set, and the kNN rule's predict cost is measured against the plain file."""

from __future__ import annotations

import json

import pytest


def test_ood_quick_mode_scores_every_rule_on_every_set(run_quick, tmp_path):
    report = run_quick("ood.py", "--work", str(tmp_path))
    (run,) = report["runs"]
    assert run["rule"] == "knn" and 0.8 <= run["test_kept_at_rule"] <= 1
    for name in ("near", "noise", "digits", "shapes"):
        for score in ("msp", "energy", "pnorm", "knn", "mahalanobis"):
            assert 0 <= run[f"{name}_auroc_{score}"] <= 1
            assert 0 <= run[f"{name}_fpr95_{score}"] <= 1
    # Colour blobs against grey digits and uniform noise: far from anything trained on.
    assert run["noise_auroc_knn"] > 0.9 and run["digits_auroc_knn"] > 0.9


def test_reject_cost_quick_mode_times_both_files(run_quick, tmp_path):
    report = run_quick("reject_cost.py", "--work", str(tmp_path))
    assert report["images"] == 64 and report["k"] == 50
    assert report["plain_ms"] > 0 and report["knn_ms"] > 0
    assert report["added"]["min"] <= report["added"]["median"] <= report["added"]["max"]


def test_int8_ece_quick_mode_compares_both_files_on_the_test_split(run_quick, tmp_path):
    report = run_quick("int8_ece.py", "--work", str(tmp_path))
    (run,) = report["runs"]
    assert run["images"] == 18 and run["temperature_fit"] == "auto"
    # auto is nll for this model (no label smoothing): the same fit, on the same validation
    # images, as training's calibrate=true
    trained = json.loads((tmp_path / "train_seed0" / "results.json").read_text())
    assert run["temperature"] == pytest.approx(trained["calibration"]["temperature"], rel=1e-3)
    for key in ("ece_fp32", "ece_int8", "acc_fp32", "acc_int8"):
        assert 0 <= run[key] <= 1
    assert run["acc_fp32"] > 0.6  # 3 colours: learned
