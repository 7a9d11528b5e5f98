"""What a cluster launcher hands the processes, put in the form Lightning reads.

``sbatch -n 2`` (``--ntasks``) leaves ``SLURM_NTASKS_PER_NODE`` unset, and Lightning's
``SLURMEnvironment`` then stops with a traceback asking for ``--ntasks-per-node``. SLURM always
sets ``SLURM_TASKS_PER_NODE`` (``2``, ``2(x3)``, or ``2,1`` when uneven): when every node runs
the same number of tasks that number is the ``--ntasks-per-node`` Lightning wants, and
``fill_slurm_tasks_per_node`` sets it; an uneven spread is one line naming the fix.
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping

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
