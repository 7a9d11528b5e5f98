"""benchmarks/precision.py --quick: bf16 autocast against fp32, paired per round."""


def test_quick_mode_times_both_precisions_and_names_the_cpu(run_quick):
    out = run_quick("precision.py")
    assert out["quick"] is True
    assert len(out["rounds"]) == 2
    for r in out["rounds"]:
        assert r["fp32"] > 0 and r["bf16"] > 0
    ratio = out["bf16_over_fp32"]
    assert ratio["min"] <= ratio["median"] <= ratio["max"]
    assert ratio["per_round"] == [r["bf16"] / r["fp32"] for r in out["rounds"]]
    # precision=auto picks bf16 exactly where the CPU reports native bf16.
    assert out["auto_resolves_to"] == ("bf16-mixed" if out["native_bf16"] else "32-true")
    assert out["cpu"] and "capability" in out["capability"]
