"""benchmarks/explain_cost.py --quick: the cost of one heat map, Grad-CAM and CAM."""


def test_quick_mode_times_both_methods_and_names_the_cpu(run_quick):
    out = run_quick("explain_cost.py")
    assert out["quick"] is True and out["cpu"]
    rows = {row["model"]: row for row in out["rows"]}
    assert set(rows) == {"simplecnn", "resnet18"}
    for row in rows.values():
        assert row["predict"]["one_image_ms"] > 0 and row["gradcam"]["one_image_ms"] > 0
        assert row["gradcam"]["batch2_per_image_ms"] > 0
    assert (
        rows["resnet18"]["cam"]["layer"] == "layer4" and rows["resnet18"]["cam"]["one_image_ms"] > 0
    )
    # simplecnn's flatten + MLP head has no CAM; the run says so instead of timing it.
    assert rows["simplecnn"]["cam"]["supported"] is False
    assert "method=cam needs a head that is global pooling" in rows["simplecnn"]["cam"]["reason"]
