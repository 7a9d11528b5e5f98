"""What a command prints by default: the user's results, not Lightning's tips or Hydra's leftovers.

Every ``Trainer`` logs and warns things a user cannot act on (the ``srun`` hint on any machine
with SLURM installed, the add-on package tips, the logging-interval warning of a short run,
deprecations inside torch). ``lightning_messages()`` drops them, and lets Lightning's other
messages through once each (the doctor's k-fold builds five trainers); ``verbose=true`` on the
command line keeps the tips too, each once. ``drop_hydra_job_line`` keeps Hydra's ``Error executing job with overrides``
off stderr (the ``error:`` line says what went wrong), and ``remove_failed_run`` removes the run
folder a failed command had just made when it holds nothing but Hydra's own files and logs.
Part of the entry-point layer (``run_cli`` calls it; conf/hydra/default.yaml names ``RunFolder``).
"""

from __future__ import annotations

import logging
import re
import shutil
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

# Lightning's loggers whose records include the tips (rank_zero_info logs through these).
TIP_LOGGERS = (
    "pytorch_lightning.utilities.rank_zero",
    "lightning.pytorch.utilities.rank_zero",
    "lightning_fabric.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
)
# The beginnings of what is hidden by default, as Lightning and torch word them.
TIPS = (
    "💡 Tip",
    "The `srun` command is available on your system but is not used",
    "The number of training batches",  # "... is smaller than the logging interval"
    "Trainer already configured with model summary callbacks",
    "TPU available",
    "HPU available",
    "`isinstance(treespec, LeafSpec)` is deprecated",
)
HYDRA_JOB_LINE = "Error executing job with overrides:"


class _TipFilter(logging.Filter):
    """Lets each message through once, and none of the tips with ``hide=True``."""

    def __init__(self, hide: bool):
        super().__init__("lightning_cls.tips")
        self.hide, self.seen = hide, set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if (self.hide and message.startswith(TIPS)) or message in self.seen:
            return False
        self.seen.add(message)  # a Trainer per fold (the doctor) says the same things again
        return True


@contextmanager
def lightning_messages(verbose: bool = False) -> Iterator[None]:
    """Within the block, Lightning's messages each at most once, and its tips and the
    deprecations a user cannot act on not at all unless ``verbose``; afterwards as before."""
    with warnings.catch_warnings():
        for tip in TIPS:
            warnings.filterwarnings("once" if verbose else "ignore", message=re.escape(tip))
        installed = [
            (logging.getLogger(name), _TipFilter(hide=not verbose)) for name in TIP_LOGGERS
        ]
        for logger, tip_filter in installed:
            logger.addFilter(tip_filter)
        try:
            yield
        finally:
            for logger, tip_filter in installed:
                logger.removeFilter(tip_filter)


class drop_hydra_job_line:  # noqa: N801 - used as a context manager, like contextlib's
    """Within the block, ``sys.stderr`` drops Hydra's ``Error executing job with overrides``
    (``JobReturn.return_value`` writes it before re-raising a job's exception)."""

    def __enter__(self) -> None:
        self.stderr = sys.stderr
        sys.stderr = _Without(self.stderr, HYDRA_JOB_LINE)

    def __exit__(self, *exc) -> None:
        if isinstance(sys.stderr, _Without):
            sys.stderr = self.stderr


class _Without:
    """A text stream that passes every write on except those starting with ``prefix``."""

    def __init__(self, stream: TextIO, prefix: str):
        self._stream, self._prefix = stream, prefix

    def write(self, text: str) -> int:
        if text.startswith(self._prefix):
            return len(text)
        return self._stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class RunFolder(Callback):
    """Remembers the run folder of the job that started last (a single run, not a sweep's job)
    and the logs folder above it, for ``remove_failed_run``: Hydra clears its own record of
    them when the job ends."""

    last: dict[str, Path] = {}

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        RunFolder.last.clear()
        if str(OmegaConf.select(config, "hydra.mode")) != "RunMode.RUN":
            return
        log_dir = OmegaConf.select(config, "paths.log_dir", default=None)
        if log_dir is not None:
            folder = Path(config.hydra.runtime.output_dir)
            RunFolder.last.update(folder=folder, log_dir=Path(log_dir).absolute())


def only_hydras_files(folder: Path, made_after: float) -> bool:
    """True when ``folder`` holds nothing but what Hydra writes before a job's code runs
    (``.hydra/`` and ``*.log`` files), all of it written after ``made_after``."""
    for item in folder.iterdir():
        hydras = (item.name == ".hydra" and item.is_dir()) or (
            item.is_file() and item.suffix == ".log"
        )
        if not hydras or item.stat().st_mtime < made_after:
            return False
        if item.is_dir() and not only_hydras_files_inside(item, made_after):
            return False
    return True


def only_hydras_files_inside(folder: Path, made_after: float) -> bool:
    """``.hydra/``: Hydra's three yaml files, written after ``made_after``."""
    return all(
        item.is_file() and item.suffix == ".yaml" and item.stat().st_mtime >= made_after
        for item in folder.iterdir()
    )


def remove_failed_run(made_after: float) -> bool:
    """Remove the run folder of a command that failed on a user error (``RunFolder.last``) and
    the folders above it it leaves empty, up to the logs folder (``outputs/``, kept), when it
    lies under that folder and holds only Hydra's own files, all written after ``made_after``
    (this command's start): never a folder with a checkpoint, a result or a user's file.
    Returns whether it removed it."""
    if not RunFolder.last:
        return False
    folder, stop_at = RunFolder.last["folder"].resolve(), RunFolder.last["log_dir"].resolve()
    RunFolder.last.clear()
    if not folder.is_dir() or stop_at not in folder.parents:
        return False
    if not only_hydras_files(folder, made_after - 1):
        return False
    for handler in list(logging.getLogger().handlers):  # Hydra's <task>.log is open: close it
        if (
            isinstance(handler, logging.FileHandler)
            and folder in Path(handler.baseFilename).parents
        ):
            logging.getLogger().removeHandler(handler)
            handler.close()
    shutil.rmtree(folder, ignore_errors=True)
    parent = folder.parent
    while parent != stop_at and stop_at in parent.parents and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent
    return True
