"""The preemption callback without SLURM: a fake ``scontrol`` on PATH records the requeue call,
and two gloo ranks, of which only rank 1 is signalled, agree: both save (during training) or
both leave (between stages), and rank 0 alone requeues. The ranks drive the callback's hooks
with a stand-in trainer (what the callback reads of it), so the test is about the agreement,
not Lightning's loops; tests/cluster/test_preemption.py runs the real command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist

from cluster.train_runs import fake_scontrol
from helpers.gloo_ranks import run_ranks
from lightning_cls.callbacks.preemption import Preempted, Preemption
from lightning_cls.training.cluster import latch_signals


class StandInTrainer(SimpleNamespace):
    """What the callback reads of a trainer; ``save_checkpoint`` writes the rank's file."""

    def __init__(self, rank: int, world: int, folder: Path):
        super().__init__(
            global_rank=rank,
            is_global_zero=rank == 0,
            world_size=world,
            strategy=SimpleNamespace(root_device=torch.device("cpu")),
            global_step=0,
            current_epoch=0,
            _logger_connector=SimpleNamespace(update_train_step_metrics=lambda: None),
            num_training_batches=100,  # the steps below are never an epoch's last
            fit_loop=SimpleNamespace(
                epoch_loop=SimpleNamespace(batch_progress=SimpleNamespace(is_last_batch=False))
            ),
            folder=folder,
        )

    def save_checkpoint(self, path) -> None:
        (self.folder / f"saved.{self.global_rank}").write_text(str(self.global_step))


def _ranks(rank: int, init: str, folder: str, where: str) -> None:
    """Rank 1 signals itself at step 2 (training) or during the fit stage (between stages);
    with ``test``, rank 0 runs one test batch more than rank 1 (the test sampler does not pad)
    and signals itself in it. Each rank writes where it left and with which code."""
    folder = Path(folder)
    # A wait of more than 20 s is a deadlock: the collective fails instead of hanging.
    dist.init_process_group(
        "gloo", init_method=init, rank=rank, world_size=2, timeout=timedelta(seconds=20)
    )
    latch_signals()  # as the training command's entry point does
    preemption = Preemption(folder / "ckpt", stages_file=folder / "stages.json")
    preemption.install_for_job()
    trainer = StandInTrainer(rank, 2, folder)
    outcome = {"left_at": None, "code": None}
    try:
        if where == "test":
            outcome = _test(rank, preemption, trainer)
            return
        for step in range(5):
            trainer.global_step = step
            if rank == 1 and step == 2:
                os.kill(os.getpid(), signal.SIGUSR1)
            if where == "training":
                preemption.on_train_batch_end(trainer, None, None, None, step)
        preemption.complete("fit", {"step": trainer.global_step}, trainer)
    except Preempted as stop:
        outcome = {"left_at": trainer.global_step, "code": stop.code}
    finally:
        preemption.uninstall()
        dist.destroy_process_group()
        (folder / f"outcome.{rank}.json").write_text(json.dumps(outcome))


def _test(rank: int, preemption: Preemption, trainer: StandInTrainer) -> dict:
    """The test stage's hooks: rank 0 runs 3 batches, rank 1 two; then the metrics' sync (a
    collective on every rank, as torchmetrics' after the loop) and the stage's end."""
    trainer.num_test_batches = [3 if rank == 0 else 2]
    outcome = {"left_at": None, "code": None}
    try:
        preemption.on_test_start(trainer, None)
        for batch in range(trainer.num_test_batches[0]):
            trainer.global_step = f"test batch {batch}"
            if rank == 0 and batch == 2:
                os.kill(os.getpid(), signal.SIGUSR1)
            preemption.on_test_batch_end(trainer, None, None, None, batch)
        trainer.global_step = "metrics sync"
        gathered = [torch.zeros(3) for _ in range(2)]
        dist.all_gather(gathered, torch.ones(3))
        trainer.global_step = "test complete"
        preemption.complete("test", {"test": {}}, trainer)
    except Preempted as stop:
        outcome = {"left_at": trainer.global_step, "code": stop.code}
    return outcome


def _outcomes(folder: Path) -> list[dict]:
    return [json.loads((folder / f"outcome.{r}.json").read_text()) for r in (0, 1)]


def test_rank_1_alone_signalled_mid_training_makes_both_ranks_save_and_leave(
    tmp_path, fork_server, fork_env
):
    env = {**fork_env, **fake_scontrol(tmp_path)}
    run_ranks(fork_server, env, tmp_path, f"{__file__}:_ranks", str(tmp_path), "training")
    assert _outcomes(tmp_path) == [{"left_at": 2, "code": 138}] * 2
    assert [(tmp_path / f"saved.{r}").read_text() for r in (0, 1)] == ["2", "2"]
    assert (tmp_path / "calls").read_text() == "requeue 4711\n"  # rank 0, once
    assert not (tmp_path / "stages.json").exists()  # the fit never completed


def test_rank_1_alone_signalled_in_a_stage_makes_both_ranks_leave_after_it(
    tmp_path, fork_server, fork_env
):
    env = {**fork_env, **fake_scontrol(tmp_path)}
    run_ranks(fork_server, env, tmp_path, f"{__file__}:_ranks", str(tmp_path), "stages")
    assert _outcomes(tmp_path) == [{"left_at": 4, "code": 138}] * 2
    assert not list(tmp_path.glob("saved.*"))  # nothing to save between stages
    assert (tmp_path / "calls").read_text() == "requeue 4711\n"
    # The stage is kept before leaving: the requeued job skips it.
    assert json.loads((tmp_path / "stages.json").read_text()) == {"fit": {"step": 4}}
    assert Preemption(tmp_path, stages_file=tmp_path / "stages.json").stages.get("fit")


def test_a_signal_in_a_test_batch_one_rank_alone_runs_leaves_after_the_test(
    tmp_path, fork_server, fork_env
):
    """The test sampler does not pad: rank 0 runs a batch more. A signal there is not agreed
    on at that batch (rank 1 is already in the metrics' sync: an all-reduce would meet the
    wrong collective) but when the test stage is complete; the ranks agree at the batches
    they both run (a signal at batch 0 or 1 leaves there: the other tests)."""
    env = {**fork_env, **fake_scontrol(tmp_path)}
    run_ranks(fork_server, env, tmp_path, f"{__file__}:_ranks", str(tmp_path), "test")
    assert _outcomes(tmp_path) == [{"left_at": "test complete", "code": 138}] * 2
    assert (tmp_path / "calls").read_text() == "requeue 4711\n"
    assert json.loads((tmp_path / "stages.json").read_text()) == {"test": {"test": {}}}


LATCH = """
import os, signal, sys
from lightning_cls.training.cluster import latch_signals, hand_over_signals
latch_signals()
os.kill(os.getpid(), signal.SIGUSR1)
print("alive", flush=True)
taken = hand_over_signals([signal.SIGUSR1] if sys.argv[1] == "taken" else [])
print("handed", taken, flush=True)
"""


def test_a_signal_before_train_runs_is_latched_and_handed_to_the_callback_or_its_default():
    """The entry point latches SIGUSR1 from its first line: the callback replays it; with no
    callback to take it, it does what it would have done at once (SIGUSR1 kills)."""
    run = [sys.executable, "-c", LATCH]
    taken = subprocess.run([*run, "taken"], capture_output=True, text=True, timeout=60)
    assert taken.returncode == 0 and taken.stdout.split("\n")[:2] == [
        "alive",
        f"handed [{int(signal.SIGUSR1)}]",
    ]
    untaken = subprocess.run([*run, "none"], capture_output=True, text=True, timeout=60)
    assert untaken.returncode == -signal.SIGUSR1 and untaken.stdout == "alive\n"


def test_install_for_job_replays_a_latched_signal_in_the_command_only(monkeypatch, tmp_path):
    from lightning_cls.training import cluster

    monkeypatch.setattr(cluster, "_LATCHED", [signal.SIGUSR1])
    preemption = Preemption(tmp_path)
    preemption.install_for_job()  # train() called from Python: the signals stay the caller's
    assert preemption.received is None and signal.getsignal(signal.SIGUSR1) != preemption._handle
    monkeypatch.setattr(cluster, "_LATCHING", True)  # the training command latched them
    try:
        preemption.install_for_job()
        assert preemption.received == signal.SIGUSR1
        assert signal.getsignal(signal.SIGUSR1) == preemption._handle
    finally:
        preemption.uninstall()
    assert signal.getsignal(signal.SIGUSR1) != preemption._handle
