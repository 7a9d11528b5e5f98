"""Preemption that loses nothing: a run sent the requeue signal (SIGUSR1) or SIGTERM mid-epoch
saves last.ckpt at the next batch end and exits 128 + signal without results; the same command
again (a requeued job: the same run folder) resumes mid-epoch and ends with the results.json
metrics of a run that was never interrupted. Subprocesses, digits, CPU."""

from __future__ import annotations

import signal

import pytest
import torch
from train_runs import results, train

SIGNAL_AT = ["+callbacks.signal_at._target_=signal_at.SignalAt", "+callbacks.signal_at.step=30"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run = tmp_path_factory.mktemp("straight") / "run"
    proc = train(run)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return results(run)


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGUSR1", "SIGTERM"])
def test_a_run_preempted_mid_epoch_resumes_to_the_same_results(uninterrupted, tmp_path, sig):
    run = tmp_path / "run"
    first = train(run, *SIGNAL_AT, f"+callbacks.signal_at.signal={sig}")
    assert first.returncode == 128 + signal.Signals[sig], first.stdout[-3000:]
    assert f"Received {sig}: saving" in first.stdout
    assert "Not in a SLURM batch job: nothing to requeue" in first.stdout or sig == "SIGTERM"
    assert not (run / "results.json").exists()  # stopped before testing
    last = run / "checkpoints" / "digits_simplecnn" / "last.ckpt"
    state = torch.load(last, map_location="cpu", weights_only=True)
    assert (state["epoch"], state["global_step"]) == (1, 31)  # mid-epoch 1 (21 steps/epoch)
    again = train(run)  # the requeued job: same command, same folder
    assert again.returncode == 0, again.stdout[-3000:]
    assert "resuming from it" in again.stdout
    assert results(run) == uninterrupted


@pytest.mark.slow
def test_without_the_callback_the_signal_loses_the_epoch(uninterrupted, tmp_path):
    """Guards the test above: SIGUSR1's default action kills the run, no checkpoint of it."""
    run = tmp_path / "run"
    first = train(run, *SIGNAL_AT, "~callbacks.preemption")
    assert first.returncode == -signal.SIGUSR1
    state = torch.load(run / "checkpoints" / "digits_simplecnn" / "last.ckpt", weights_only=True)
    assert state["global_step"] == 21  # the end of epoch 0: epoch 1's 10 steps are lost
