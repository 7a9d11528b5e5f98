"""benchmarks/train_throughput.py: paired per-round ratios and a --quick smoke run."""

import pytest


def test_paired_ratios_are_computed_within_each_round(benchmark_module):
    tt = benchmark_module("train_throughput")
    # Round 2 is uniformly 2x slower (a busy machine): paired ratios must not move.
    r1 = dict.fromkeys(tt.VARIANTS, 100.0) | {"tensor": 90.0, "fast": 300.0, "pil_cap": 120.0}
    r2 = {v: x / 2 for v, x in r1.items()}
    r3 = dict.fromkeys(tt.VARIANTS, 100.0) | {"tensor": 80.0, "fast": 250.0, "pil_cap": 100.0}
    out = tt.paired([r1, r2, r3])
    assert out["tensor_over_ceiling"]["per_round"] == pytest.approx([0.9, 0.9, 0.8])
    assert out["tensor_over_ceiling"]["median"] == pytest.approx(0.9)
    assert out["fast_over_classic"]["min"] == pytest.approx(2.5)
    assert out["fast_over_classic"]["max"] == pytest.approx(3.0)
    assert out["lightning_overhead"]["per_round"] == pytest.approx([0.1, 0.1, 0.2])
    assert out["thread_cap_gain"]["per_round"] == pytest.approx([0.2, 0.2, 0.0])
    assert "compile_gain" not in out  # its opt-in variant did not run


def test_compile_gain_is_paired_against_fast(benchmark_module):
    tt = benchmark_module("train_throughput")
    assert "fast_compiled" not in tt.VARIANTS  # opt-in: the default run never compiles
    rounds = [{"fast": 100.0, "fast_compiled": 86.0}, {"fast": 50.0, "fast_compiled": 60.0}]
    out = tt.paired(rounds)
    assert out["compile_gain"]["per_round"] == pytest.approx([-0.14, 0.2])
    assert set(out) == {"compile_gain"}


def test_summarize_rejects_no_rounds(benchmark_module):
    paired = benchmark_module("paired")
    with pytest.raises(ValueError, match="at least one round"):
        paired.summarize([])


def test_quick_mode_prints_per_round_json(run_quick):
    out = run_quick("train_throughput.py")
    assert out["quick"] is True
    assert len(out["rounds"]) == 2
    for r in out["rounds"]:
        assert set(r) == {"classic", "pil", "tensor", "ceiling", "fast", "plain", "pil_cap"}
        assert all(v > 0 for v in r.values())
    for key in ("tensor_over_ceiling", "fast_over_classic", "lightning_overhead"):
        stats = out[key]
        assert stats["min"] <= stats["median"] <= stats["max"]
        assert len(stats["per_round"]) == 2
    # bf16 is used exactly when the CPU supports it (and never claimed otherwise).
    assert out["bf16_used"] == out["bf16_supported"]


def test_profile_groups_ops_by_what_they_compute(benchmark_module):
    tp = benchmark_module("train_profile")
    assert tp.group_of("aten::convolution_backward") == "conv backward"
    assert tp.group_of("aten::mkldnn_convolution") == "conv forward"
    assert tp.group_of("aten::max_pool2d_with_indices_backward") == "max-pool"
    assert tp.group_of("aten::_fused_adam_") == "optimizer"
    assert tp.group_of("aten::addmm") == "linear"
    assert tp.group_of("aten::threshold_backward") == "relu"  # not "linear" by its "t"
    assert tp.group_of("ProfilerStep*") == "other"


@pytest.mark.parametrize("native", [True, False])
def test_profile_adds_the_bf16_layout_exactly_where_bf16_is_native(
    benchmark_module, monkeypatch, native
):
    # Both branches on any CPU: the layout list is a decision on the capability, faked here.
    tp = benchmark_module("train_profile")
    monkeypatch.setattr(tp, "cpu_has_native_bf16", lambda: native)
    assert ("channels_last_fused_bf16" in tp.layouts()) is native
    assert tp.layouts()["channels_last_fused"] == (tp.torch.channels_last, False, True)


def test_profile_quick_mode_times_and_profiles_every_layout(run_quick):
    out = run_quick("train_profile.py")
    names = {"nchw@8", "channels_last@8", "channels_last_fused@8"}
    assert names <= set(out["rounds"][0]) and all(v > 0 for v in out["rounds"][0].values())
    assert set(out["ratios"]) == set(out["rounds"][0]) - {"nchw@8"}
    assert ("channels_last_fused_bf16@8" in out["rounds"][0]) == out["bf16_native"]
    for prof in out["profiles"].values():
        # a training step's time is mostly its convolutions, forward and backward
        assert prof["groups_ms"]["conv backward"] > 0 and prof["groups_ms"]["conv forward"] > 0
        assert prof["wall_ms_per_step"] > 0
