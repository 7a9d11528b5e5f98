"""Hydra's submitit launcher (``hydra/launcher=slurm``) on the real one-node cluster: a sweep of
two jobs, one preempted mid-epoch the way submitit does it (its ``SlurmJob._interrupt()``:
SIGTERM, then SIGUSR2), is requeued by submitit, resumes in its own job folder, and
``summarize`` over the sweep equals ``summarize`` over the same sweep run uninterrupted."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_slurm import job_state
from train_runs import SMALL, env, results

from lightning_cls.summarize import summarize

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# What conf/hydra/launcher/slurm.yaml needs on this 2-CPU node without GPUs or declared memory
# (docs/guides/cluster.md, "Hydra's submitit launcher").
LAUNCHER = [
    "hydra/launcher=slurm",
    "hydra.launcher.partition=debug",
    "hydra.launcher.cpus_per_task=1",  # 8: more than the node has, pending forever
    "hydra.launcher.mem_gb=null",  # 64: the node declares no memory, pending forever
    "hydra.launcher.gpus_per_node=null",  # trainer.devices: sbatch refuses a GPU request
    "hydra.launcher.timeout_min=60",  # a signal in the first 48 min is a preemption
]
# Two tiny jobs: one process each, 10 steps of one epoch (the whole val and test sets).
JOB = [
    *[o for o in SMALL if not o.startswith("trainer.max_epochs")],
    "trainer.max_epochs=1",
    "+trainer.limit_train_batches=10",
    "trainer.accelerator=cpu",
    "trainer.devices=1",
]
SWEEP = "seed=1,2"
PAUSE_STEP = 5  # job 0 waits there for SIGUSR2; saved at that batch's end: step 6 of 10


def multirun(sweep: Path, *overrides: str) -> subprocess.Popen:
    """``python -m lightning_cls.train -m ...`` started in ``sweep``'s parent; its output goes
    to ``multirun.out`` there (a pipe nobody reads could fill up and block it)."""
    command = [sys.executable, "-m", "lightning_cls.train", "-m", f"hydra.sweep.dir={sweep}",
               f"paths.root_dir={sweep.parent}", *JOB, *overrides, SWEEP]  # fmt: skip
    with (sweep.parent / "multirun.out").open("w") as out:
        return subprocess.Popen(command, cwd=sweep.parent, env=env(), stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip


def output(proc: subprocess.Popen, sweep: Path, timeout: float = 240) -> str:
    """Wait for the multirun to end; its output's last lines."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
    return (sweep.parent / "multirun.out").read_text()[-3000:]


def wait_for(path: Path, proc: subprocess.Popen, sweep: Path, timeout: float = 150) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{path} never appeared:\n{output(proc, sweep)}")
        time.sleep(0.2)


def summary(sweep: Path) -> list[list[str]]:
    """summarize's table (summary.csv) without its wall-time column."""
    rows = list(csv.reader(summarize(sweep)["csv"].open()))
    keep = [i for i, name in enumerate(rows[0]) if name != "wall_time_s"]
    return [[row[i] for i in keep] for row in rows]


def test_submitit_sweep_job_preempted_is_requeued_and_summarize_equals(
    slurm_cluster, submitit, tmp_path
):
    sweep, reference = tmp_path / "slurm" / "sweep", tmp_path / "local" / "sweep"
    sweep.parent.mkdir()
    reference.parent.mkdir()
    pause = ["+callbacks.pause_at._target_=pause_at.PauseAt",
             f"+callbacks.pause_at.step={PAUSE_STEP}", f"+callbacks.pause_at.folder={tmp_path}",
             "+callbacks.pause_at.job=${hydra:job.num}", "+callbacks.pause_at.pause_job=0",
             "+callbacks.pause_at.signal=SIGUSR2"]  # fmt: skip
    parent = multirun(sweep, *LAUNCHER, *pause)
    wait_for(tmp_path / "paused.0", parent, sweep)
    local = multirun(reference)  # the same sweep uninterrupted, Hydra's basic launcher

    array_job = next((sweep / ".submitit").glob("*_0")).name  # <array job id>_0
    submitit.SlurmJob(folder=sweep / ".submitit" / "%j", job_id=array_job)._interrupt()
    out = output(parent, sweep)
    assert parent.returncode == 0, out
    log = (sweep / ".submitit" / array_job / f"{array_job}_0_log.out").read_text()
    assert (
        f"Received SIGUSR2: saving {sweep}/0/" in log and f"(step {PAUSE_STEP + 1}, epoch 0)" in log
    )
    assert "Handing the requeue to submitit." in log and f"Requeued job {array_job}" in log
    assert log.count("Starting with JobEnvironment") == 2  # the requeued job ran again ...
    assert re.search(rf"holds {sweep}/0/\S+last.ckpt \(a restarted job\): resuming", log)
    assert "Received SIGTERM" not in log  # submitit's SIGTERM first: SIGUSR2 outranked it
    state, restarts = job_state(array_job)  # ... as the same SLURM job, requeued once
    assert (state in ("RUNNING", "COMPLETING", "COMPLETED"), restarts) == (True, 1), state
    assert sorted(p.name for p in sweep.iterdir() if not p.name.startswith(".")) == [
        "0", "1", "multirun.yaml"]  # fmt: skip
    assert not (sweep.parent / "outputs").exists()  # no second run folder anywhere

    out = output(local, reference)
    assert local.returncode == 0, out
    for job in ("0", "1"):
        assert results(sweep / job) == results(reference / job), job
    assert results(sweep / "0")["best_val_acc"] is not None
    assert summary(sweep) == summary(reference)
