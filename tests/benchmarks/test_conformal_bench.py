"""benchmarks/conformal.py --quick: train calibration=default calibration.conformal=0.1, then calibrate for the
other alpha/method settings; each reports coverage and mean set size on the test split."""

from __future__ import annotations


def test_conformal_quick_mode_reports_coverage_and_set_size(run_quick, tmp_path):
    report = run_quick("conformal.py", "--work", str(tmp_path))
    (run,) = report["runs"]
    assert run["temperature"] > 0
    for setting in ("raps_0.1", "raps_0.05", "aps_0.1", "aps_0.05"):
        measured = run[setting]
        assert 0 <= measured["test_coverage"] <= 1 and measured["test_mean_set_size"] >= 1
        assert 0 < measured["qhat"]
        resplit = run["resplit"][setting]
        assert 0 <= resplit["mean"] <= 1 and resplit["sd"] >= 0
