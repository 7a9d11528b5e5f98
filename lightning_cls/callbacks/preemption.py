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
under submitit rank 0 exits as submitit's handler does, ``sys.exit(-1)``), before the run
reaches test and writes results.json.

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
its own; the SIGTERM handler is re-installed once training starts, after Lightning's.
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
    """

    def __init__(
        self,
        dirpath: str | os.PathLike,
        filename: str = "last.ckpt",
        requeue_signals: list[str] | tuple[str, ...] = ("SIGUSR1",),
        stop_signals: list[str] | tuple[str, ...] = ("SIGTERM",),
        requeue: str | bool = "auto",
    ):
        if requeue not in ("auto", False):
            raise ValueError(f"requeue={requeue!r}; use auto or false.")
        self.path = Path(dirpath) / filename
        self.actions = {
            **{_signum(name): "stop" for name in stop_signals},
            **{_signum(name): "requeue" for name in requeue_signals},
        }
        self.requeue = requeue
        self.received: int | None = None  # the signal number, set by the handler
        self._previous: dict[int, Any] = {}
        self._active = dict(self.actions)  # this fit's actions (submitit adds its signal)

    # The handler does nothing but record: no I/O, no collective (see the module docstring).
    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is None or self._rank(signum) > self._rank(self.received):
            self.received = signum

    def _rank(self, signum: int) -> int:
        """The signal with its action's rank above it: requeue > stop > save."""
        return ACTIONS.index(self._active.get(signum, "stop")) * 64 + signum

    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal.signal works in the main thread only
        for signum in self._active:
            current = signal.getsignal(signum)
            if current != self._handle:
                self._previous.setdefault(signum, current)
                signal.signal(signum, self._handle)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self.received = None
            self._active = dict(self.actions)
            submitit = submitit_signal()
            if submitit is not None:  # a submitit job: its signal requeues, SIGTERM only saves
                self._active = {s: "save" if a == "stop" else a for s, a in self.actions.items()}
                self._active[submitit] = "requeue"
            self._install()  # before Lightning's: it adds no SIGUSR1 handler of its own then

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._install()  # after Lightning's SIGTERM handler (registered once fit starts)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if threading.current_thread() is threading.main_thread():
            for signum, handler in self._previous.items():
                if handler is not None:
                    signal.signal(signum, handler)
        self._previous = {}

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx
    ) -> None:
        signum = agreed_signal(self._rank(self.received) if self.received else 0, trainer) % 64
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
        if action == "requeue" and self.requeue == "auto" and trainer.is_global_zero:
            requeue_job(signum, self._previous.get(signum))
        raise Preempted(128 + signum)


def agreed_signal(signum: int, trainer: pl.Trainer) -> int:
    """The largest of the ranks' values (0: no signal), the same on every rank: one tiny
    all-reduce per step under DDP, at a point every rank reaches in the same order."""
    if not (dist.is_available() and dist.is_initialized() and trainer.world_size > 1):
        return signum
    flag = torch.tensor([signum], device=trainer.strategy.root_device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return int(flag.item())


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
