"""Preemption that loses nothing: a run sent the requeue signal (SIGUSR1) or SIGTERM mid-epoch
saves last.ckpt at the next batch end and exits 128 + signal without results; the same command
again (a requeued job: the same run folder) resumes mid-epoch and ends with the results.json
metrics of a run that was never interrupted. The same at the other moments of a job (setup,
validation, the fit's last hooks, test), inside a fake SLURM job whose ``scontrol`` records the
requeue; the CSV and TensorBoard logs of the requeued run are one curve. Subprocesses, digits,
CPU."""

from __future__ import annotations

import csv
import signal
import struct
from pathlib import Path

import pytest
import torch
from signal_at import SignalAt
from train_runs import fake_scontrol, results, train_forked

from helpers import make_data, make_module, make_trainer
from lightning_cls.callbacks.preemption import Preemption

SIGNAL_AT = ["+callbacks.signal_at._target_=signal_at.SignalAt", "+callbacks.signal_at.step=30"]


@pytest.fixture(scope="module")
def train(fork_server, fork_env):
    return lambda run, *overrides: train_forked(fork_server, fork_env, run, *overrides)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, train):
    run = tmp_path_factory.mktemp("straight") / "run"
    proc = train(run)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return results(run)


LOGGED = ["logger=[csv,tensorboard]"]


@pytest.fixture(scope="module")
def logged(tmp_path_factory, train):
    """An uninterrupted run with the CSV and TensorBoard loggers: its folder."""
    run = tmp_path_factory.mktemp("logged") / "run"
    proc = train(run, *LOGGED)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return run


# The training metrics aggregated over an epoch cover only the batches after a mid-epoch resume
# (torchmetrics' and Lightning's epoch accumulators are not in the checkpoint): compared by
# step, not by value. Every per-step and validation value is compared exactly.
EPOCH_TRAIN = ("train/acc", "train/acc_top5", "train/loss_epoch")


def _comparable(key: str, value):
    return "<epoch aggregate>" if key in EPOCH_TRAIN else value


def csv_rows(run: Path) -> list[tuple]:
    """metrics.csv's rows without the wall-clock columns (time/*), in file order."""
    with open(run / "csv" / "metrics.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [
        tuple(
            (k, _comparable(k, v)) for k, v in sorted(r.items()) if not k.startswith("time/") and v
        )
        for r in rows
    ]


def tensorboard_scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] over every event file in the run's one TensorBoard folder, in
    the order written (by the events' wall time: file names order two attempts by their
    start second, then pid; TFRecord framing: length, its crc, the Event, its crc)."""
    from tensorboardX.proto.event_pb2 import Event

    points = []
    for path in (run / "tensorboard").glob("events.out.tfevents.*"):
        data, at = path.read_bytes(), 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            event = Event.FromString(data[at + 12 : at + 12 + length])
            at += 12 + length + 4
            for value in event.summary.value:
                # The hyper-parameters' entries are written at each process start, not a curve.
                if not value.tag.startswith(("time/", "_hparams_/", "hp_metric")):
                    point = (event.step, _comparable(value.tag, value.simple_value))
                    points.append((event.wall_time, value.tag, point))
    scalars: dict[str, list] = {}
    for _, tag, point in sorted(points, key=lambda p: p[0]):  # stable: file order within a time
        scalars.setdefault(tag, []).append(point)
    return scalars


MOMENTS = {  # SignalAt's moment and batch: where in the job the one signal comes
    "setup": ["moment=setup"],
    # The last step of epoch 0: saved there, the resumed fit would end the epoch without its
    # validation; the ranks act at the end of epoch 1's first step instead.
    "last_step": ["moment=train", "step=20"],
    "validation": ["moment=val", "step=0", "batch=1"],  # epoch 0's validation
    "fit_end": ["moment=fit_end"],  # the fit's last hooks (calibration, export, plots)
    "test": ["moment=test", "batch=1"],
}


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_requeue_signal_at_any_moment_loses_nothing(
    logged, fork_server, fork_env, tmp_path, moment
):
    """One SIGUSR1 at ``moment`` of a job in (fake) SLURM job 4711: rank 0 runs ``scontrol
    requeue 4711`` and the job exits 138; the requeued job (same command, same folder) does
    not fit again after a complete fit, and ends with the uninterrupted run's results.json
    metrics, CSV rows (each step once, in order) and TensorBoard curves in one folder."""
    run, env = tmp_path / "run", {**fork_env, **fake_scontrol(tmp_path)}
    signal_at = [
        "+callbacks.signal_at._target_=signal_at.SignalAt",
        f"+callbacks.signal_at.marker={tmp_path / 'signalled'}",
        *(f"+callbacks.signal_at.{option}" for option in MOMENTS[moment]),
    ]
    first = train_forked(fork_server, env, run, *LOGGED, *signal_at)
    assert first.returncode == 128 + signal.SIGUSR1, first.stdout[-3000:]
    assert (tmp_path / "calls").read_text() == "requeue 4711\n"
    assert not (run / "results.json").exists()
    again = train_forked(fork_server, env, run, *LOGGED, *signal_at)
    assert again.returncode == 0, again.stdout[-3000:]
    if moment == "last_step":  # not saved at step 21 (the epoch's last), at step 22
        assert "(step 22, epoch 1)" in first.stdout, first.stdout[-3000:]
    fitted_before = moment in ("fit_end", "test")
    assert ("Trainer.fit" in again.stdout) is not fitted_before, again.stdout[-3000:]
    assert (tmp_path / "calls").read_text() == "requeue 4711\n"  # no second requeue
    assert results(run) == results(logged)
    assert csv_rows(run) == csv_rows(logged)
    assert [p.name for p in (run / "tensorboard").iterdir() if p.is_dir()] == []  # one version
    assert tensorboard_scalars(run) == tensorboard_scalars(logged)


def wandb_steps(run: Path, key: str) -> tuple[set[str], list[int]]:
    """The W&B run ids of the run folder's offline attempts, and the ``trainer/global_step`` of
    each history row holding ``key``, attempts in order (what ``wandb sync`` uploads)."""
    from training.test_wandb_logger import read_wandb_file

    ids, steps = set(), []
    for folder in sorted((run / "wandb").glob("offline-run-*")):  # named by start time
        (log_file,) = folder.glob("run-*.wandb")
        for record in read_wandb_file(log_file):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                ids.add(record.run.run_id)
            elif kind == "history":
                row = {i.key or "/".join(i.nested_key): i.value_json for i in record.history.item}
                if key in row:
                    steps.append(int(float(row["trainer/global_step"])))
    return ids, steps


def mlflow_steps(root: Path, key: str) -> tuple[list[str], list[int]]:
    """The MLflow runs of the file store under ``root``, and the steps of ``key`` logged in
    them (the file store's ``metrics/<key>``: one ``time value step`` line per point)."""
    runs = [p.parent for p in root.rglob("mlruns/*/*/meta.yaml") if (p.parent / "metrics").is_dir()]
    lines = [ln for r in runs for ln in (r / "metrics" / key).read_text().splitlines()]
    return [r.name for r in runs], [int(line.split()[2]) for line in lines]


def test_a_requeued_job_continues_its_loggers_runs(
    logged, fork_server, fork_env, tmp_path, monkeypatch
):
    """SIGUSR1 mid-epoch (step 25 of 42) of a job logging to CSV, TensorBoard, W&B (offline)
    and MLflow: after the requeue each logger holds one run with one continuous curve, every
    logged step once (the steps of the uninterrupted run's CSV), no gap, no repeat."""
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    run, env = tmp_path / "run", {**fork_env, **fake_scontrol(tmp_path)}
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DIR=str(tmp_path / "wandb_home"))
    env.update({k: str(tmp_path / "wandb_home") for k in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR")})
    signal_at = [
        "+callbacks.signal_at._target_=signal_at.SignalAt",
        f"+callbacks.signal_at.marker={tmp_path / 'signalled'}",
        "+callbacks.signal_at.step=25",
    ]
    loggers = "logger=[csv,tensorboard,wandb,mlflow]"
    first = train_forked(fork_server, env, run, loggers, *signal_at)
    assert first.returncode == 128 + signal.SIGUSR1, first.stdout[-3000:]
    assert "(step 26, epoch 1)" in first.stdout  # saved after step 25: mid-epoch
    again = train_forked(fork_server, env, run, loggers, *signal_at)
    assert again.returncode == 0, again.stdout[-3000:]
    assert results(run) == results(logged)
    assert csv_rows(run) == csv_rows(logged)
    assert tensorboard_scalars(run) == tensorboard_scalars(logged)
    rows = csv.DictReader((logged / "csv" / "metrics.csv").read_text().splitlines())
    expected = [int(r["step"]) for r in rows if r.get("train/loss_step")]
    assert len(expected) >= 4  # steps on both sides of the signal
    ids, steps = wandb_steps(run, "train/loss_step")
    assert len(list((run / "wandb").glob("offline-run-*"))) == 2  # one folder per attempt
    assert (len(ids), steps) == (1, expected)  # one W&B run, the curve continued
    mlflow_runs, steps = mlflow_steps(tmp_path, "train/loss_step")
    assert (len(mlflow_runs), steps) == (1, expected)
    assert (run / "mlflow_run_id").read_text().strip() == mlflow_runs[0]


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGUSR1", "SIGTERM"])
def test_a_run_preempted_mid_epoch_resumes_to_the_same_results(uninterrupted, train, tmp_path, sig):
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
def test_without_the_callback_the_signal_loses_the_epoch(uninterrupted, train, tmp_path):
    """Guards the test above: SIGUSR1's default action kills the run, no checkpoint of it."""
    run = tmp_path / "run"
    first = train(run, *SIGNAL_AT, "~callbacks.preemption")
    assert first.returncode == -signal.SIGUSR1
    state = torch.load(run / "checkpoints" / "digits_simplecnn" / "last.ckpt", weights_only=True)
    assert state["global_step"] == 21  # the end of epoch 0: epoch 1's 10 steps are lost


def test_a_requeue_signal_outranks_a_stop_signal_in_either_order(tmp_path):
    for first, second in [(signal.SIGTERM, signal.SIGUSR1), (signal.SIGUSR1, signal.SIGTERM)]:
        preemption = Preemption(tmp_path)
        preemption._handle(first, None)
        preemption._handle(second, None)
        assert preemption.received == signal.SIGUSR1


@pytest.fixture
def submitit_job(tmp_path, monkeypatch):
    """submitit's own handlers in this process (SIGTERM/SIGCONT: bypass, SIGUSR2: checkpoint
    and requeue), as a job of hydra/launcher=slurm has them; the old ones restored after."""
    submitit = pytest.importorskip("submitit")  # the sweep extra
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    monkeypatch.delenv("SUBMITIT_PREEMPT_SIGNAL", raising=False)
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGCONT, signal.SIGUSR2)}
    job = submitit.JobEnvironment()
    job._handle_signals(
        submitit.core.utils.JobPaths(tmp_path, "1"), submitit.helpers.DelayedSubmission(print)
    )
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_under_submitit_its_signal_requeues_and_sigterm_only_saves(submitit_job, tmp_path):
    """submitit ignores SIGTERM and sends it before its own signal on a preemption: the
    callback saves (mid-epoch) and trains on, and takes SIGUSR2 as a requeue signal."""
    data = make_data()  # 3 steps
    preemption = Preemption(tmp_path / "ckpt")
    signal_at = SignalAt(step=1, signal="SIGTERM")
    trainer = make_trainer(tmp_path, [preemption, signal_at])
    trainer.fit(make_module(data), datamodule=data)
    assert trainer.state.finished and trainer.global_step == trainer.num_training_batches == 3
    state = torch.load(tmp_path / "ckpt" / "last.ckpt", map_location="cpu", weights_only=True)
    assert state["global_step"] == 2  # saved at the end of the signalled batch
    assert preemption._active == {
        signal.SIGUSR1: "requeue",
        signal.SIGTERM: "save",
        signal.SIGUSR2: "requeue",
    }
    assert "submitit" in signal.getsignal(signal.SIGUSR2).__module__  # handed back after fit
