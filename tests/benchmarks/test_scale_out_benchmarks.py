"""Smoke tests of the scale-out benchmark scripts' --quick modes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def test_nan_guard_sync_quick(run_quick):
    out = run_quick("nan_guard_sync.py")
    assert out["syncs_per_step"]["one_flag"] == 1 and out["gradients"] > 10
    assert out["speedup"]["median"] > 0


@pytest.mark.slow
def test_sweep_launchers_quick_and_joblib_runs_two_jobs_with_the_cores_split(run_quick, tmp_path):
    """The suite's one joblib sweep (tests/sweep/test_launchers.py runs submitit's): the
    benchmark's --quick round, whose jobs must also be what a joblib multirun promises."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    out = run_quick("sweep_launchers.py", "--root", str(tmp_path), cwd=tmp_path, timeout=900)
    assert out["joblib_wall_s"]["median"] > 0 and len(out["rounds"]) == 1
    (round_,) = out["rounds"]
    cores = os.cpu_count()
    # loky gives each of the 2 worker processes cores // 2 threads: no oversubscription; the
    # basic launcher runs its jobs one after the other with every core's thread.
    assert round_["joblib"]["threads"] == [max(1, cores // 2)] * 2
    assert round_["sequential"]["threads"] == [cores] * 2
    for variant in ("joblib", "sequential"):
        sweep = Path(round_[variant]["sweep"])
        jobs = [json.loads((sweep / str(j) / "results.json").read_text()) for j in (0, 1)]
        assert [
            ("optimizer.lr=0.001" in j["overrides"], "optimizer.lr=0.003" in j["overrides"])
            for j in jobs
        ] == [(True, False), (False, True)]
        assert all(j["test"]["test/acc"] > 0.3 for j in jobs)  # chance is 0.1
        for num, job in enumerate(jobs):  # each job's checkpoints in its own job folder
            assert (
                Path(job["best_ckpt"]).parent
                == sweep / str(num) / "checkpoints" / "digits_simplecnn"
            )
