"""benchmarks/plots_cost.py --quick: every TrainingPlots figure and the prediction mosaic are
drawn, written and timed."""

FIGURES = {
    "curves_10_epochs",
    "confusion_10_classes",
    "confusion_100_classes",
    "per_class_accuracy_10_classes",
    "per_class_accuracy_100_classes",
    "per_label_10_labels",
    "prediction_mosaic_48_tiles",
}


def test_quick_mode_times_every_figure_and_keeps_the_pngs(run_quick, tmp_path):
    out = run_quick("plots_cost.py", "--out", str(tmp_path), timeout=120)
    assert out["quick"] is True and out["repeats"] == 1 and out["cpu"]
    assert set(out["figures"]) == FIGURES
    for name, row in out["figures"].items():
        assert 0 < row["min_s"] <= row["median_s"] <= row["max_s"]
        png = tmp_path / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert row["png_bytes"] == png.stat().st_size
