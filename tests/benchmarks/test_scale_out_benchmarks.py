"""Smoke tests of the scale-out benchmark scripts' --quick modes."""

from __future__ import annotations

import pytest


def test_nan_guard_sync_quick(run_quick):
    out = run_quick("nan_guard_sync.py")
    assert out["syncs_per_step"]["one_flag"] == 1 and out["gradients"] > 10
    assert out["speedup"]["median"] > 0


@pytest.mark.slow
def test_sweep_launchers_quick(run_quick, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    out = run_quick("sweep_launchers.py", cwd=tmp_path, timeout=900)
    assert out["joblib_wall_s"]["median"] > 0 and len(out["rounds"]) == 1
