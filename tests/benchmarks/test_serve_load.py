"""benchmarks/serve_load.py --quick: runs, every 200 is correct, the JSON carries every key.

--quick starts each server kind once (not the settings-only variants threads1 and resnet18_spin)
and skips the repeat measurements at other concurrencies; the full mode runs them all.
"""

import time

import psutil
import pytest

KEYS = (
    "echo_rps_c64",
    "tutorial_rps_c64",
    "batch1_rps_c64",
    "dynamic_rps_c64",
    "p99_ms_c16",
    "resnet18_served_img_s_c32",
    "resnet18_inprocess_img_s_b32",
    "overload_bad_5xx",
    "overload_rss_growth_mb",
    "client_cpu_cores",
    "workers2_rps_c64",
    "spin_rps_c64",
)


@pytest.mark.slow
def test_quick_mode_prints_json_with_the_issue_keys(run_quick):
    started = time.time()
    out = run_quick("serve_load.py", timeout=900)
    # The servers it started are gone (bare LitServe's forked HTTP processes, serve workers).
    left = []
    for proc in psutil.process_iter(["cmdline", "create_time", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        ours = "litserve_echo.py" in cmdline or "tutorial_server.py" in cmdline
        ours = ours or ("lightning_cls.serve" in cmdline and "serve_load_" in cmdline)
        alive = proc.info["status"] != psutil.STATUS_ZOMBIE
        if ours and alive and proc.info["create_time"] >= started - 1:
            left.append(cmdline)
    assert not left, left
    assert out["quick"] is True
    assert all(key in out for key in KEYS)
    assert out["wrong_answers"] == 0  # every 200 equals in-process predict
    assert out["overload_bad_5xx"] == 0
    assert out["overload"]["healthy_after"] is True
    assert set(out["overload"]["codes"]) <= {"200", "503", "504", "transport_error"}
    assert out["dynamic_rps_c64"] > 0 and out["batch1_rps_c64"] > 0
    assert 0 < out["client_cpu_cores"]["dynamic_c64"] <= out["cpu_count"]
