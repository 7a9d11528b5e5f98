"""What a cluster launcher hands the processes, put in the form Lightning reads.

``sbatch -n 2`` (``--ntasks``) leaves ``SLURM_NTASKS_PER_NODE`` unset, and Lightning's
``SLURMEnvironment`` then stops with a traceback asking for ``--ntasks-per-node``. SLURM always
sets ``SLURM_TASKS_PER_NODE`` (``2``, ``2(x3)``, or ``2,1`` when uneven): when every node runs
the same number of tasks that number is the ``--ntasks-per-node`` Lightning wants, and
``fill_slurm_tasks_per_node`` sets it; an uneven spread is one line naming the fix.

A scheduler's warning signal can come before training code runs: ``latch_signals`` records
SIGUSR1/SIGTERM from the entry point's first line until the preemption callback takes them over
(``hand_over_signals``).
"""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Iterable, MutableMapping
from typing import Any

# Lightning's convention (SLURMEnvironment): allocations named so are shells, not batch jobs.
SLURM_INTERACTIVE_NAMES = ("bash", "interactive")


def fill_slurm_tasks_per_node(environ: MutableMapping[str, str] = os.environ) -> str | None:
    """Set ``SLURM_NTASKS_PER_NODE`` from ``SLURM_TASKS_PER_NODE`` for an ``-n N`` job step
    whose nodes run equally many tasks; return the value set (None: nothing to do)."""
    if (
        "SLURM_NTASKS" not in environ
        or "SLURM_NTASKS_PER_NODE" in environ
        or environ.get("SLURM_JOB_NAME") in SLURM_INTERACTIVE_NAMES
        or int(environ["SLURM_NTASKS"]) <= 1
    ):
        return None
    spread = environ.get("SLURM_TASKS_PER_NODE", "")
    even = re.fullmatch(r"(\d+)(\(x\d+\))?", spread)
    if even is None:
        raise ValueError(
            f"sbatch/srun -n {environ['SLURM_NTASKS']} spread the tasks unevenly over the nodes "
            f"(SLURM_TASKS_PER_NODE={spread or 'unset'}); Lightning needs as many on every node: "
            "ask for --nodes=<N> --ntasks-per-node=<trainer.devices> instead of -n."
        )
    environ["SLURM_NTASKS_PER_NODE"] = even.group(1)
    return even.group(1)


# Signals recorded from process start (``latch_signals``) until the preemption callback takes
# them over for the whole job (``hand_over_signals``): a scheduler's warning during Hydra's
# composition or the imports must not kill the job (SIGUSR1's default action) before train()
# can save and requeue. Stdlib only: the entry point installs it before anything heavy loads.
_LATCHED: list[int] = []
_LATCHING = False  # latch_signals ran in this process: it is a training command


def latching() -> bool:
    """Whether this process's entry point latched the signals (``python -m lightning_cls.train``
    did; a notebook or a test calling ``train()`` did not)."""
    return _LATCHING


def _latch(signum: int, frame: Any) -> None:
    _LATCHED.append(signum)


def latch_signals(names: tuple[str, ...] = ("SIGUSR1", "SIGTERM")) -> None:
    """Record these signals instead of dying of them, until ``hand_over_signals`` (main thread
    only; a signal whose handler is not the default is left alone: someone else owns it)."""
    global _LATCHING
    if threading.current_thread() is not threading.main_thread():
        return
    _LATCHING = True
    for name in names:
        signum = signal.Signals[name]
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _latch)


def hand_over_signals(taken: Iterable[int]) -> list[int]:
    """The latched signals among ``taken`` (the new owner replays them), in arrival order.
    Every other latched signal gets its default action back, and one that arrived is raised
    again now: it does what it would have done at once (SIGTERM stops the process)."""
    taken = set(taken)
    arrived, _LATCHED[:] = list(_LATCHED), []
    for signum in {*arrived, *_latched_now()} - taken:
        signal.signal(signum, signal.SIG_DFL)
    for signum in dict.fromkeys(s for s in arrived if s not in taken):
        signal.raise_signal(signum)
    return [s for s in arrived if s in taken]


def _latched_now() -> set[int]:
    if threading.current_thread() is not threading.main_thread():
        return set()
    return {
        s for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM) if signal.getsignal(s) is _latch
    }
