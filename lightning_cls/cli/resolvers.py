"""The OmegaConf resolvers the configs use, registered by ``register_resolvers()``.

``${run_stamp:%Y-%m-%d/%H-%M-%S}`` names a run folder and ``${rank_zero_only:.hydra}`` keeps
the ``.hydra`` config copy to one rank (``conf/hydra/train.yaml``). Every entry point that
composes ``conf/train.yaml`` calls ``register_resolvers()`` at import.

One job, one run folder. The processes of one job compose their configs separately (``srun``
starts every rank, torchrun's agents start theirs), and a requeued SLURM job starts again from
scratch, so the folder name must come from something they all see without talking to each
other: the SLURM job id, the torchrun rendezvous id of a multi-node launch, or the start time
of the torchrun agent on one node. An explicit ``hydra.run.dir=...`` replaces the whole name.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

from omegaconf import OmegaConf

# Lightning's convention (SLURMEnvironment): an allocation named so is a shell the user types
# commands into, each its own run, not one job.
SLURM_INTERACTIVE_NAMES = ("bash", "interactive")


def register_resolvers() -> None:
    """Register this package's resolvers once (a second call is a no-op)."""
    if not OmegaConf.has_resolver("run_stamp"):
        OmegaConf.register_new_resolver("run_stamp", run_stamp, use_cache=True)
    if not OmegaConf.has_resolver("rank_zero_only"):
        OmegaConf.register_new_resolver("rank_zero_only", rank_zero_only)


def run_stamp(fmt: str) -> str:
    """The name of this job's run folder below ``outputs/<task>/``.

    - SLURM batch job (``sbatch``/``srun``, not an interactive shell): ``slurm/<job id>``
      (an array task: ``slurm/<array job id>_<task id>``), the same on every rank, node and
      requeue of the job;
    - torchrun across nodes: ``torchrun/<rendezvous id>`` (``--rdzv-id``, the same on every
      node; torchrun's default id ``none`` is refused: it would be every job's);
    - torchrun on one node: the start time of the launching agent (every local rank's parent);
    - otherwise: now, formatted by ``fmt``.

    The job-id names have as many folder levels as ``fmt`` (``slurm/123`` for a ``fmt`` with
    one ``/``), so ``ckpt_path=last``'s glob over ``<date>/<time>`` folders finds them too.
    """
    job = _slurm_job_id()
    if job is not None:
        return _levels(fmt, "slurm", job)
    if "TORCHELASTIC_RUN_ID" in os.environ:
        run_id = os.environ["TORCHELASTIC_RUN_ID"]
        if _torchrun_nodes() > 1:
            if run_id in ("", "none"):
                raise ValueError(
                    "torchrun across nodes with the default --rdzv-id=none: the nodes cannot agree "
                    "on one run folder; pass the same --rdzv-id=<job id> to every node's torchrun "
                    "(or hydra.run.dir=<shared folder>)."
                )
            return _levels(fmt, "torchrun", _safe(run_id))
        started = _torchrun_agent_start()
        if started:
            return datetime.fromtimestamp(started).strftime(fmt)
    return datetime.now().strftime(fmt)


def rank_zero_only(value: str) -> str | None:
    """``value`` on the job's first process, None on the others (``hydra.output_subdir``: only
    one rank writes ``.hydra/``; the others would write it into the same folder at once)."""
    return value if process_rank() == 0 else None


def process_rank() -> int:
    """This process's global rank as its launcher set it before Lightning starts: torchrun's
    ``RANK``, srun's ``SLURM_PROCID``, or a node/local rank above 0 (Lightning's launchers)."""
    if "RANK" in os.environ:
        return int(os.environ["RANK"])
    if _slurm_job_id() is not None and "SLURM_PROCID" in os.environ:
        return int(os.environ["SLURM_PROCID"])
    return max(int(os.environ.get("NODE_RANK", 0)), int(os.environ.get("LOCAL_RANK", 0)))


def _slurm_job_id() -> str | None:
    """The id that stays the same over a SLURM job's ranks, nodes and requeues; None outside a
    batch job (no SLURM, or an interactive allocation)."""
    job = os.environ.get("SLURM_JOB_ID")
    if job is None or os.environ.get("SLURM_JOB_NAME") in SLURM_INTERACTIVE_NAMES:
        return None
    array_job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return _safe(f"{array_job}_{task}" if array_job and task else job)


def _torchrun_nodes() -> int:
    """How many nodes' agents take part: WORLD_SIZE over the processes of this node."""
    world = int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return max(1, world // max(local, 1))


def _levels(fmt: str, kind: str, job: str) -> str:
    return f"{kind}/{job}" if "/" in fmt else f"{kind}-{job}"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _torchrun_agent_start() -> float | None:
    """Start time (s since the epoch) of the parent process, from Linux /proc; else None."""
    try:
        stat = Path(f"/proc/{os.getppid()}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime (after comm)
        boot = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime")
        )
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")
