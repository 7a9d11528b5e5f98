"""benchmarks/serve_load.py --quick: runs, every 200 is correct, the JSON carries every key."""

import pytest

KEYS = (
    "echo_rps_c64",
    "litserve_echo_rps_c64",
    "tutorial_rps_c64",
    "batch1_rps_c64",
    "dynamic_rps_c64",
    "p99_ms_c16",
    "resnet18_served_img_s_c32",
    "resnet18_inprocess_img_s_b32",
    "overload_bad_5xx",
    "overload_rss_growth_mb",
)


@pytest.mark.slow
def test_quick_mode_prints_json_with_the_issue_keys(run_quick):
    out = run_quick("serve_load.py", timeout=900)
    assert out["quick"] is True
    assert all(key in out for key in KEYS)
    assert out["wrong_answers"] == 0  # every 200 equals in-process predict
    assert out["overload_bad_5xx"] == 0
    assert out["overload"]["healthy_after"] is True
    assert set(out["overload"]["codes"]) <= {"200", "503", "504", "transport_error"}
    assert out["dynamic_rps_c64"] > 0 and out["resnet18_served_img_s_c32"] > 0
