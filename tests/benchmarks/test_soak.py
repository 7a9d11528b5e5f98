"""benchmarks/soak.py --quick: ~20 s of good, slow and malformed requests against
``lightning_cls.serve``; the JSON carries every key and kind, no good request failed, the
server's file descriptors did not grow. Speed targets (p99, RSS) are the full run's business
(docs/benchmarks.md), not this smoke test's."""

import pytest

KEYS = (
    "good_errors",
    "wrong_answers",
    "codes",
    "findings",
    "rss_growth_pct",
    "fds_idle_before",
    "fds_idle_after",
    "per_window",
    "p99_last_over_first",
    "req_s",
    "targets",
    "samples",
)
KINDS = {
    "good_predict",
    "good_oip",
    "slow_body_completes",
    "slow_body_stalls",
    "bad_json",
    "wrong_shape",
    "nan",
    "oversized",
    "garbage_line",
}


@pytest.mark.slow
def test_quick_soak_has_no_good_errors_and_flat_fds(run_quick):
    out = run_quick("soak.py", timeout=600)
    assert out["quick"] is True
    assert all(key in out for key in KEYS)
    assert KINDS <= set(out["codes"])
    assert set(out["targets"]) == {
        "no_good_errors",
        "rss_growth_le_5pct",
        "fds_flat",
        "p99_within_20pct",
    }
    assert out["good_errors"] == 0, out["codes"]
    assert out["codes"]["good_predict"].get("200", 0) > 0
    assert out["codes"]["good_oip"].get("200", 0) > 0
    assert out["fds_idle_after"] - out["fds_idle_before"] <= 4, out["samples"]
    # Each malformed request got a 4xx (or a close), never a 5xx.
    assert not any(code.startswith("5") for codes in out["codes"].values() for code in codes), out[
        "codes"
    ]
    assert all(w["n"] > 0 for w in out["per_window"])


def test_latencies_fall_in_their_windows(benchmark_module):
    windows = benchmark_module("soak").windows
    latency = [(0.5, 0.010), (1.5, 0.020), (61.0, 0.030), (119.0, 0.040), (130.0, 0.050)]
    per = windows(latency, 60.0, 120.0)  # the run ran past 120 s: last window takes the rest
    assert [w["n"] for w in per] == [2, 3]
    assert per[0]["p99_ms"] == pytest.approx(20.0)
    assert per[1]["p50_ms"] == pytest.approx(40.0)
