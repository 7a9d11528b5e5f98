"""The OmegaConf resolvers the configs use, registered by ``register_resolvers()``.

``${run_stamp:%Y-%m-%d_%H-%M-%S}`` names a run folder (``conf/hydra/train.yaml``). Every entry
point that composes ``conf/train.yaml`` calls ``register_resolvers()`` at import.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from omegaconf import OmegaConf


def register_resolvers() -> None:
    """Register this package's resolvers once (a second call is a no-op)."""
    if not OmegaConf.has_resolver("run_stamp"):
        OmegaConf.register_new_resolver("run_stamp", run_stamp, use_cache=True)


def run_stamp(fmt: str) -> str:
    """The time that names a run folder: now, or under torchrun the start time of the
    launching agent — the parent of every local rank — so all ranks pick the same folder
    without talking to each other (``hydra.run.dir`` in conf/hydra/train.yaml)."""
    started = _torchrun_agent_start() if "TORCHELASTIC_RUN_ID" in os.environ else None
    return (datetime.fromtimestamp(started) if started else datetime.now()).strftime(fmt)


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
