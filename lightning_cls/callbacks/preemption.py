"""``Preemption``: on a cluster's warning signal, checkpoint at the next batch end and requeue.

A scheduler that is about to stop a job warns it with a signal: SLURM sends what
``sbatch --signal=SIGUSR1@90`` asks for, submitit asks for SIGUSR2, clusters that preempt
without a warning signal send SIGTERM before SIGKILL. This callback's handler only records the
signal, on every rank that receives it. At the end of the next training batch — a point every
rank reaches in the same order — the ranks agree (any rank's flag counts), save one checkpoint
(``trainer.save_checkpoint``: the trainer's ``AtomicCheckpointIO`` writes it atomically, with
the loops' progress, the RNG states and the data loader's position, so the resumed run
continues mid-epoch exactly), and then:

- a requeue signal under a SLURM batch job: rank 0 runs ``scontrol requeue <job>``; the job
  starts again in the same run folder (``run_stamp``) and ``auto_resume`` continues from the
  checkpoint;
- under submitit (``hydra/launcher=slurm``): submitit's signal (``SUBMITIT_PREEMPT_SIGNAL``,
  SIGUSR2 by default) is a requeue signal without being listed: the handler submitit had
  installed is called, which pickles the job, runs ``scontrol requeue`` and exits;
- a stop signal (SIGTERM): no requeue (a scheduler that preempts requeues the job itself; a
  cancelled job stays cancelled).

Every rank then exits with ``128 + signal number`` (the code of a process the signal killed;
under submitit rank 0 exits as submitit's handler does, ``sys.exit(-1)``).

For the whole job, not only the fit: train.py calls ``install_for_job`` before the trainer
exists (the entry point latched the signals from its first line: ``training.cluster``) and
``complete(stage, record)`` after each stage. The ranks also agree at every test batch end
(test saves nothing: the restarted job tests again) and after each stage; the stages done are
kept in ``stages.json`` of the run folder (``training.resume.Stages``): a requeued job does not
fit again after a complete fit, nor test again after a complete test, and writes the same
results.json from the records. A signal during the last validation, the calibration or the
export is acted on when the fit ends (they are the fit's last hooks).

A requeue signal wins over a stop signal received before the same batch end, on any rank.
Under submitit a stop signal only saves and training goes on: submitit ignores SIGTERM
(``bypass``), and its preemption is SIGTERM followed by its own signal (``_interrupt``), so
stopping on the SIGTERM would end the job before submitit could requeue it.

Why not Lightning's own SLURM auto-requeue: its SIGUSR1 handler saves a checkpoint inside the
signal handler, and its SIGTERM handler broadcasts a tensor there. A Python signal handler runs
wherever the main thread is — on one rank inside a gradient all-reduce's aftermath, on another
already in the next batch — so the collectives of that save (a barrier) and that broadcast
meet other collectives on the other ranks and every rank waits forever (seen with two DDP
ranks under srun). Installing a SIGUSR1 handler before the fit loop keeps Lightning from adding
its own; the SIGTERM handler is re-installed at each stage's start, after Lightning's.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.distributed as dist

from lightning_cls.training.cluster import hand_over_signals, latching
from lightning_cls.training.resume import Stages

log = logging.getLogger(__name__)

# An action's rank: the highest any rank received wins (see agreed_signal).
ACTIONS = ("save", "stop", "requeue")
SUBMITIT_SIGNAL_ENV = "SUBMITIT_PREEMPT_SIGNAL"  # submitit's name for its signal (default USR2)


class Preempted(SystemExit):
    """Raised on every rank after the preemption checkpoint is saved (exit code 128 + signal)."""


class Preemption(pl.Callback):
    """Save ``dirpath/filename`` at the batch end after a signal, then requeue or stop.

    Args:
        dirpath: the folder of the checkpoint (the run folder's checkpoint folder, where
            ``auto_resume`` looks for ``last.ckpt``).
        filename: the checkpoint's file name.
        requeue_signals: signal names that ask for a checkpoint and a requeue.
        stop_signals: signal names that ask for a checkpoint and a stop.
        requeue: ``auto`` (``scontrol requeue`` in a SLURM batch job, submitit's own requeue
            under submitit, nothing elsewhere) or ``false``.
        stages_file: where the job's completed stages are kept (``<run folder>/stages.json``):
            a requeued job skips them. None: in memory only.
    """

    def __init__(
        self,
        dirpath: str | os.PathLike,
        filename: str = "last.ckpt",
        requeue_signals: list[str] | tuple[str, ...] = ("SIGUSR1",),
        stop_signals: list[str] | tuple[str, ...] = ("SIGTERM",),
        requeue: str | bool = "auto",
        stages_file: str | os.PathLike | None = None,
    ):
        if requeue not in ("auto", False):
            raise ValueError(f"requeue={requeue!r}; use auto or false.")
        self.path = Path(dirpath) / filename
        self.actions = {
            **{_signum(name): "stop" for name in stop_signals},
            **{_signum(name): "requeue" for name in requeue_signals},
        }
        self.requeue = requeue
        self.stages = Stages(stages_file)
        self.received: int | None = None  # the signal number, set by the handler
        self._previous: dict[int, Any] = {}
        self._active = dict(self.actions)  # this fit's actions (submitit adds its signal)
        self._job = False  # handlers installed for the whole job (install_for_job)
        self._test_batches: list[int] = []  # per test loader: the batches every rank runs

    # The handler does nothing but record: no I/O, no collective (see the module docstring).
    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is None or self._rank(signum) > self._rank(self.received):
            self.received = signum

    def _rank(self, signum: int) -> int:
        """The signal with its action's rank above it: requeue > stop > save."""
        return ACTIONS.index(self._active.get(signum, "stop")) * 64 + signum

    def _configure(self) -> None:
        self._active = dict(self.actions)
        submitit = submitit_signal()
        if submitit is not None:  # a submitit job: its signal requeues, SIGTERM only saves
            self._active = {s: "save" if a == "stop" else a for s, a in self.actions.items()}
            self._active[submitit] = "requeue"

    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal.signal works in the main thread only
        for signum in self._active:
            current = signal.getsignal(signum)
            if current != self._handle:
                self._previous.setdefault(signum, current)
                signal.signal(signum, self._handle)

    def _restore(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for signum, handler in self._previous.items():
                if handler is not None:
                    signal.signal(signum, handler)
        self._previous = {}

    def install_for_job(self) -> None:
        """Handle the signals from now until ``uninstall``: train.py calls it before the
        trainer exists, so setup, every stage and what lies between them are covered. Signals
        latched since the process started (``training.cluster.latch_signals``) count now.

        Only in a process whose entry point latched them (the training command): a caller of
        ``train()`` in Python (a notebook, a test) keeps its signals outside the fit. A
        ``ddp_spawn`` parent that only waits for its processes would otherwise swallow a
        SIGTERM (``timeout``, ``kill``) until the fit ends."""
        if not latching():
            return
        self._job = True
        self._configure()
        self._install()
        for signum in hand_over_signals(self._active):
            self._handle(signum, None)

    def uninstall(self) -> None:
        """Give the signals back to their previous handlers (the job is complete)."""
        self._job = False
        self._restore()

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._job:
            self._install()
        elif stage == "fit":  # a trainer used without train.py: the handlers live for the fit
            self.received = None
            self._configure()
            self._install()  # before Lightning's: it adds no SIGUSR1 handler of its own then

    # Lightning wraps the SIGTERM handler in its own (a broadcast inside the handler) right
    # before each stage runs: take it back at each stage's start.
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._install()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._job:
            self._install()

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._job:
            self._install()
            self._test_batches = common_batches(trainer.num_test_batches, trainer)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not self._job:
            self._restore()

    def on_exception(self, trainer: pl.Trainer, pl_module, exception: BaseException) -> None:
        """An error ends the job (not a preemption: ``Preempted`` leaves the process anyway):
        the signals go back, so a caller that goes on (a notebook, a test) is not left with a
        SIGTERM that only records."""
        if not isinstance(exception, Preempted):
            self.uninstall()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx
    ) -> None:
        if _last_batch_of_epoch(trainer, batch_idx):
            # A checkpoint here resumes into an epoch whose batches are all done: Lightning
            # then ends it without its validation (a 20-signal SLURM job lost its val metrics
            # and best checkpoint so). The signal waits: the next epoch's first batch, or the
            # fit's end. The same decision on every rank (their batch counts are equal).
            return
        signum = self._agreed(trainer)
        if not signum:
            return
        action = self._active.get(signum, "stop")
        log.warning(
            "Received %s: saving %s (step %d, epoch %d) and %s.",
            signal.Signals(signum).name,
            self.path,
            trainer.global_step,
            trainer.current_epoch,
            {"requeue": "requeueing the job", "stop": "stopping", "save": "training on "
             "(submitit ignores it and requeues on its own signal)"}[action],
        )  # fmt: skip
        if action == "save":
            self.received = None  # before the save: a signal during it counts at the next step
        trainer.save_checkpoint(self.path)  # every rank calls it; rank 0 writes
        if action == "save":
            return
        # Lightning logs this step's metrics after the batch-end hooks; the resumed job starts
        # at the next step, so log them now or the curve misses this step. No public hook logs
        # a step: a private call (Lightning pinned to the tested minor version in pyproject).
        trainer._logger_connector.update_train_step_metrics()
        self._leave(trainer, signum, action)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The training loop is complete: its metrics are kept, for a job that restarts in the
        fit's last hooks (calibration, export), where they are gone from the trainer."""
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
        self.stages.record("train", {"metrics": metrics}, trainer.is_global_zero)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        """Test holds nothing worth saving: leave now, the restarted job tests again. Only at
        the batches every rank runs: the test sampler does not pad (the metrics equal one
        process's), so one rank may run a batch more, and an agreement there would wait
        forever for the others (they are already in the metrics' sync). A signal after the
        last common batch is acted on when the test stage is complete."""
        if self._job and batch_idx < self._test_batches[dataloader_idx]:
            self.leave_if_signalled(trainer, "testing")

    def complete(self, stage: str, record: Any, trainer: pl.Trainer) -> None:
        """``stage`` of the job is complete (train.py, between stages): keep its record, then
        leave if a signal came (during the stage or since the last check), on every rank."""
        self.stages.record(stage, record, trainer.is_global_zero)
        self.leave_if_signalled(trainer, f"the {stage} stage is complete")

    def leave_if_signalled(self, trainer: pl.Trainer, where: str) -> None:
        """Every rank calls it at the same point: if any rank received a signal, requeue or
        stop (a ``save`` under submitit: nothing to save here, go on)."""
        signum = self._agreed(trainer)
        if not signum:
            return
        action = self._active.get(signum, "stop")
        if action == "save":  # SIGTERM under submitit: nothing to save here; go on
            self.received = None
            return
        log.warning(
            "Received %s (%s): %s.",
            signal.Signals(signum).name,
            where,
            "requeueing the job" if action == "requeue" else "stopping",
        )
        self._leave(trainer, signum, action)

    def _agreed(self, trainer: pl.Trainer) -> int:
        return agreed_signal(self._rank(self.received) if self.received else 0, trainer) % 64

    def _leave(self, trainer: pl.Trainer, signum: int, action: str) -> None:
        if action == "requeue" and self.requeue == "auto" and trainer.is_global_zero:
            requeue_job(signum, self._previous.get(signum))
        raise Preempted(128 + signum)


def _last_batch_of_epoch(trainer: pl.Trainer, batch_idx: int) -> bool:
    batches = trainer.num_training_batches
    last = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
    return bool(last) or (batches != float("inf") and batch_idx + 1 >= batches)


def agreed_signal(signum: int, trainer: pl.Trainer) -> int:
    """The largest of the ranks' values (0: no signal), the same on every rank: one tiny
    all-reduce per step under DDP, at a point every rank reaches in the same order."""
    if not (dist.is_available() and dist.is_initialized() and trainer.world_size > 1):
        return signum
    flag = torch.tensor([signum], device=trainer.strategy.root_device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return int(flag.item())


def common_batches(counts: list[int | float], trainer: pl.Trainer) -> list[int]:
    """Per loader, the number of batches every rank runs (the smallest count over the ranks;
    0 for a loader of unknown length): one all-reduce, at a hook every rank reaches."""
    local = [int(n) if n != float("inf") else -1 for n in counts]
    if dist.is_available() and dist.is_initialized() and trainer.world_size > 1 and local:
        tensor = torch.tensor(local, device=trainer.strategy.root_device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
        local = [int(n) for n in tensor.tolist()]
    return [max(n, 0) for n in local]


def _signum(name: str) -> int:
    try:
        return int(signal.Signals[name if name.startswith("SIG") else f"SIG{name}"])
    except KeyError:
        known = ", ".join(s.name for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM))
        raise ValueError(f"Unknown signal {name!r}; use a name such as {known}.") from None


def submitit_signal() -> int | None:
    """submitit's preemption signal in a submitit job (submitit's handler is installed for it),
    else None."""
    signum = _signum(os.environ.get(SUBMITIT_SIGNAL_ENV, "USR2"))
    return signum if _is_submitit(signal.getsignal(signum)) else None


def _is_submitit(handler: Any) -> bool:
    return "submitit" in (getattr(handler, "__module__", None) or "")


def requeue_job(signum: int, submitit_handler: Any = None) -> None:
    """Requeue this job: submitit's handler where submitit installed one, else
    ``scontrol requeue`` in a SLURM batch job; elsewhere only log what to do."""
    if _is_submitit(submitit_handler):
        log.warning("Handing the requeue to submitit.")
        # submitit pickles the job, requeues it and exits (sys.exit(-1)); where it will not
        # requeue (max_num_timeout reached) it raises UncompletedJobError: the job ends failed.
        submitit_handler(signum, None)
        return
    job = slurm_job()
    if job is None:
        log.warning("Not in a SLURM batch job: nothing to requeue; run the same command again.")
        return
    proc = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
    if proc.returncode:
        log.error(
            "scontrol requeue %s failed (%s); the checkpoint is saved: resubmit the job with "
            "hydra.run.dir=<this run folder> to continue.",
            job,
            proc.stderr.strip() or proc.returncode,
        )
    else:
        log.warning("Requeued SLURM job %s.", job)


def slurm_job() -> str | None:
    """``<job id>`` or ``<array job id>_<task id>`` of a SLURM batch job, else None."""
    if "SLURM_JOB_ID" not in os.environ:
        return None
    array_job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array_job}_{task}" if array_job and task else os.environ["SLURM_JOB_ID"]
