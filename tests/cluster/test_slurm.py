"""A real one-node SLURM cluster (scripts/slurm_cluster.sh): ``sbatch`` + ``srun python -m
lightning_cls.train`` with two CPU DDP tasks leaves one run folder with the metrics of the same
job run with ``trainer=ddp_sim``; the job sent ``scancel --signal=USR1`` mid-epoch requeues
itself, resumes in place and ends with the same metrics."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from train_runs import SMALL, env, results

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
ONE_EPOCH = [*SMALL, "trainer.max_epochs=1"]  # 21 steps of 2 x 32 digits


def sbatch(root: Path, tasks: str, *overrides: str) -> str:
    """Submit ``srun python -m lightning_cls.train trainer=ddp_cpu ...`` below ``root``."""
    args = " ".join(
        [sys.executable, "-m", "lightning_cls.train", "trainer=ddp_cpu", *ONE_EPOCH, *overrides]
    )
    script = root / "job.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH {tasks}\nsrun {args} paths.root_dir={root}\n")
    proc = subprocess.run(
        ["sbatch", "--parsable", "--job-name=lc-train", f"--chdir={root}", "--open-mode=append",
         f"--output={root}/slurm-%j.out", str(script)],
        capture_output=True, text=True, env=env(), check=True,
    )  # fmt: skip
    return proc.stdout.strip().split(";")[0]


def job_state(job: str) -> tuple[str, int]:
    """(state, restart count) from scontrol; ("GONE", 0) once SLURM forgot the job."""
    proc = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True)
    fields = dict(f.split("=", 1) for f in proc.stdout.split() if "=" in f)
    return fields.get("JobState", "GONE"), int(fields.get("Restarts", 0))


def wait_done(job: str, timeout: float = 240) -> tuple[str, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state, restarts = job_state(job)
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "GONE"):
            return state, restarts
        time.sleep(0.5)
    subprocess.run(["scancel", job])
    raise AssertionError(f"job {job} still {state} after {timeout} s")


def same_training(ours: dict, ddp_sim: dict) -> bool:
    """Equal metrics, the best checkpoint's score included (ddp_sim reads it back from the
    checkpoint: ddp_spawn does not return it to the parent)."""
    return ours["best_val_acc"] is not None and ours == ddp_sim


def run_folders(root: Path) -> list[Path]:
    return sorted(p for p in (root / "outputs" / "train").glob("*/*") if p.is_dir())


def log(root: Path, job: str) -> str:
    return (root / f"slurm-{job}.out").read_text()


def test_srun_ddp_job_has_one_run_folder_and_ddp_sims_metrics(slurm_cluster, ddp_sim, tmp_path):
    job = sbatch(tmp_path, "--ntasks-per-node=2")
    assert wait_done(job) == ("COMPLETED", 0), log(tmp_path, job)[-3000:]
    assert run_folders(tmp_path) == [tmp_path / "outputs" / "train" / "slurm" / job]
    run = run_folders(tmp_path)[0]
    assert (run / ".hydra" / "config.yaml").is_file()
    assert json.loads((run / "results.json").read_text())["run_dir"] == str(run)
    assert same_training(results(run), ddp_sim)


def test_usr1_mid_epoch_requeues_and_resumes_in_place(slurm_cluster, ddp_sim, tmp_path):
    # -n 2 without --ntasks-per-node: train fills in what Lightning asks for.
    pause = [
        "+callbacks.pause_at._target_=pause_at.PauseAt",
        "+callbacks.pause_at.step=10",
        f"+callbacks.pause_at.folder={tmp_path}",
    ]
    job = sbatch(tmp_path, "-n 2", *pause)
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"paused.{r}").exists() for r in (0, 1)):
        assert time.monotonic() < deadline, log(tmp_path, job)[-3000:]
        time.sleep(0.2)
    subprocess.run(["scancel", "--signal=USR1", job], check=True)
    assert wait_done(job) == ("COMPLETED", 1), log(tmp_path, job)[-3000:]
    text = log(tmp_path, job)
    # Restarts=1 and the resume below prove the save and requeue; the first attempt's lines
    # are checked where SLURM kept them (a requeue may start the log anew despite append:
    # seen once in CI-like runs).
    if text.count("[rank: 0] Seed set to") > 1:
        assert "Received SIGUSR1: saving" in text and f"Requeued SLURM job {job}" in text
    assert "resuming from it" in text
    assert run_folders(tmp_path) == [tmp_path / "outputs" / "train" / "slurm" / job]
    assert same_training(results(run_folders(tmp_path)[0]), ddp_sim)


# One 1-epoch job's moments, in job order, grouped by where the ranks act on a signal: the
# fit's setup or step 0's start (both at step 0's end), the start of each later step (its end),
# the last step (an epoch's last step waits: here the fit's end), a validation batch or the
# fit's last hooks (the fit's end: a second signal there would never come, the requeued job
# does not fit again), each test batch (the next test batch's end).
TIMELINE = [
    [("setup", 0, 0), ("train", 0, 0)],
    *([("train", step, 0)] for step in range(1, 20)),
    [("train", 20, 0), ("val", 0, 0), ("val", 0, 1), ("fit_end", 0, 0)],
    *([("test", 0, batch)] for batch in range(5)),
]
# LIGHTNING_CLS_PREEMPTIONS=20 runs the twenty: 340 s of job, 16 s a signal on the
# loaded 2-core test machine (SLURM holds a requeued job 5-8 s: cred_expire=5, its least, and
# the scheduler; an attempt runs 7-15 s: the two ranks' start, the steps, the exit). The suite
# sends 2, one in validation or the fit's last hooks, one in test: a signal mid-epoch is
# test_usr1_mid_epoch_requeues_and_resumes_in_place's (sent by scancel, as SLURM sends it), one
# at setup or step 0 tests/cluster/test_preemption.py's; LIGHTNING_CLS_PREEMPTIONS=3 adds one at
# setup or step 0 here.
SIGNALS = int(os.environ.get("LIGHTNING_CLS_PREEMPTIONS", "2"))


def test_signals_at_random_moments_of_one_job_lose_nothing(slurm_cluster, ddp_sim, tmp_path):
    """SIGUSR1 to one random rank at SIGNALS random moments of one 2-rank job (one of them in
    the test phase): the job is requeued once per signal and ends COMPLETED in one run folder,
    with results.json metrics bit-equal to the uninterrupted job's (trainer=ddp_sim)."""
    seed = int(os.environ.get("LIGHTNING_CLS_PREEMPTION_SEED", time.time_ns() % 10**6))
    rng = random.Random(seed)
    # Always one signal in the test phase, then one in validation or the fit's last hooks
    # (calibration, export), then one at setup or step 0; the rest anywhere.
    sure = [rng.choice([i for i, group in enumerate(TIMELINE) if group[-1][0] == kind])
            for kind in ("test", "fit_end")] + [0]  # fmt: skip
    chosen = sure[:SIGNALS]
    chosen += rng.sample(
        [i for i in range(len(TIMELINE)) if i not in chosen], SIGNALS - len(chosen)
    )
    plan = [[*rng.choice(TIMELINE[i]), rng.randrange(2)] for i in sorted(chosen)]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    where = f"seed {seed} (LIGHTNING_CLS_PREEMPTION_SEED), plan {plan}"
    job = sbatch(
        tmp_path,
        "-n 2",
        "+callbacks.signal_at._target_=signal_at.SignalAt",
        f"+callbacks.signal_at.plan={tmp_path / 'plan.json'}",
    )
    state = wait_done(job, timeout=120 + 60 * SIGNALS)
    sent = sum((tmp_path / f"plan.json.{i}").exists() for i in range(len(plan)))
    assert (state, sent) == (("COMPLETED", SIGNALS), SIGNALS), (
        f"{where}\n{log(tmp_path, job)[-3000:]}"
    )
    assert run_folders(tmp_path) == [tmp_path / "outputs" / "train" / "slurm" / job], where
    run = run_folders(tmp_path)[0]
    assert same_training(results(run), ddp_sim), where
    assert not (run / "stages.json").exists(), where  # the job is complete: nothing to skip
    text = log(tmp_path, job)
    # The fit ends once (an interrupted fit does not reach its end; after a complete fit a
    # requeued attempt does not fit again), the run's one test once.
    assert text.count("`Trainer.fit` stopped") == 1, where
