"""Hydra launchers as config: submitit_local runs 2 jobs; the SLURM launcher is sized from the
trainer. (joblib's 2-job sweep: tests/benchmarks/test_scale_out_benchmarks.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("hydra_plugins.hydra_joblib_launcher")  # the `sweep` extra

FAST = [
    "trainer.max_epochs=1",
    "trainer.enable_progress_bar=false",
    "~callbacks.progress_bar",
    "~callbacks.model_summary",
    "~callbacks.plots",
    "~callbacks.model_weights",
]


def _multirun(tmp_path: Path, *overrides: str, env: dict | None = None) -> list[dict]:
    cmd = [
        sys.executable,
        "-m",
        "lightning_cls.train",
        "-m",
        "optimizer.lr=1e-3,3e-3",
        *FAST,
        f"paths.root_dir={tmp_path}",
        f"hydra.sweep.dir={tmp_path}/sweep",
        *overrides,
    ]
    proc = subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env or dict(os.environ)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((tmp_path / "sweep" / str(j) / "results.json").read_text()) for j in (0, 1)]


def _assert_isolated(jobs: list[dict], tmp_path: Path) -> None:
    assert [
        ("optimizer.lr=0.001" in j["overrides"], "optimizer.lr=0.003" in j["overrides"])
        for j in jobs
    ] == [(True, False), (False, True)]
    assert all(j["test"]["test/acc"] > 0.3 for j in jobs)  # chance is 0.1
    # Each job's checkpoints live in its own job folder.
    for num, job in enumerate(jobs):
        assert (
            Path(job["best_ckpt"]).parent
            == tmp_path / "sweep" / str(num) / "checkpoints" / "digits_simplecnn"
        )


# The joblib launcher's 2-job sweep (folders, overrides, cores split between the jobs) is checked
# on benchmarks/sweep_launchers.py's --quick round, the same sweep:
# tests/benchmarks/test_scale_out_benchmarks.py::test_sweep_launchers_quick_and_joblib_runs_...


@pytest.mark.slow
def test_submitit_local_runs_two_jobs(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    jobs = _multirun(tmp_path, "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10")
    _assert_isolated(jobs, tmp_path)
    assert list((tmp_path / "sweep" / ".submitit").glob("*/*_log.out"))  # submitit ran them


def test_slurm_launcher_is_sized_from_the_trainer():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from hydra import compose, initialize_config_dir

    from lightning_cls import config_dir

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose(
            "train",
            ["hydra/launcher=slurm", "trainer=ddp", "trainer.devices=4", "trainer.num_nodes=2"],
            return_hydra_config=True,
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.nodes, launcher.tasks_per_node, launcher.gpus_per_node) == (2, 4, 4)
    assert launcher.max_num_timeout == 3  # requeued on timeout; auto_resume continues the job
