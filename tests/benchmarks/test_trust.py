"""benchmarks/trust.py --quick: train calibration=default reject=energy, then eval ood= per set."""

from __future__ import annotations


def test_trust_quick_mode_reports_ece_and_ood_auroc(run_quick, tmp_path):
    report = run_quick("trust.py", "--work", str(tmp_path))
    assert report["temperature"] > 0
    assert {"val_ece_before", "val_ece_after", "test_ece_before", "test_ece_after"} <= set(report)
    assert report["reject"]["score"] == "energy" and report["reject"]["keep"] == 0.95
    # Colour images vs. grey digits: told apart after one epoch (noise varies in --quick).
    assert report["auroc_digits_energy"] > 0.9
    assert 0 <= report["auroc_noise_energy"] <= 1 and 0 <= report["false_accept_noise"] <= 1
