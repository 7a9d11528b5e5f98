"""``run_cli(main)``: how every entry point ends — a user error in one line, a bug in a traceback.

Each ``python -m lightning_cls.<tool>`` calls ``run_cli(main)`` under ``if __name__ ==
"__main__"``. A wrong setting (a bad value, a missing file, an unknown config key) then ends
with one line on stderr that names it, and exit code 1; ``HYDRA_FULL_ERROR=1`` or ``debug=true``
on the command line shows the full traceback instead. Any other exception is a bug and keeps
its traceback. Part of the entry-point layer: it knows Hydra's exception types.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from hydra.errors import CompactHydraException, InstantiationException
from omegaconf.errors import OmegaConfBaseException

# What a user can fix from the command line; anything else is a bug and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
    ConnectionError,
    CompactHydraException,  # bad override, missing config group option
    OmegaConfBaseException,  # missing mandatory value (???), unknown key
)
DEBUG_FLAGS = ("debug=true", "debug=True", "debug=1")
HELP_FLAGS = ("--help", "-h", "--hydra-help")
# Set for child processes (DDP re-launches the command) so they report like their parent.
_FULL_ERROR_ENV = "LIGHTNING_CLS_FULL_ERROR"


def run_cli(main: Callable[[], Any]) -> None:
    """Call a ``@hydra.main`` function; report a user error as one line and exit 1."""
    args = sys.argv[1:]
    full = _full_error_requested(debug=any(a in DEBUG_FLAGS for a in args))
    sys.argv = [sys.argv[0]] + [a for a in args if a not in DEBUG_FLAGS]
    os.environ[_FULL_ERROR_ENV] = "1" if full else "0"
    # Hydra prints its own shortened traceback unless HYDRA_FULL_ERROR=1: let the error reach
    # us instead, and decide here how to show it.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    if any(a in HELP_FLAGS for a in args):  # Hydra's help text, without its repository copies
        from lightning_cls.cli.hydra_help import share_group_repository  # only for --help

        share_group_repository()
    try:
        main()
    except (*USER_ERRORS, ImportError) as err:
        if full:
            raise
        cause = _user_cause(err)
        if cause is None:
            raise  # a bug wrapped by instantiate: keep the traceback
        sys.stderr.write(f"error: {describe(cause, where=_config_key(err))}\n")
        sys.exit(1)


def _full_error_requested(debug: bool) -> bool:
    inherited = os.environ.get(_FULL_ERROR_ENV)
    if inherited is not None:
        return inherited == "1"
    return debug or os.environ.get("HYDRA_FULL_ERROR") == "1"


def _user_cause(err: BaseException) -> BaseException | None:
    """The error to show: through ``instantiate``'s wrapper to the constructor's own error.

    An ``ImportError`` is a user's to fix when its message says what to ``pip install`` (a
    missing extra: ``data=streaming`` without litdata, the optuna sweeper without Optuna) or
    when ``instantiate`` could not locate a misspelt ``_target_``; any other is a bug."""
    wrapper = err
    while isinstance(err, InstantiationException) and err.__cause__ is not None:
        err = err.__cause__
    if isinstance(err, ImportError):
        if "pip install" in str(err):
            return err
        return wrapper if wrapper is not err else None  # "Error locating target ..."
    return err if isinstance(err, USER_ERRORS) else None


def _config_key(err: BaseException) -> str | None:
    """The config node whose ``_target_`` raised (``data``, ``callbacks.mixup``), if known."""
    if isinstance(err, InstantiationException):
        for line in str(err).splitlines():
            if line.strip().startswith("full_key:"):
                return line.split(":", 1)[1].strip() or None
    return None


def describe(err: BaseException, where: str | None = None) -> str:
    """A one-line description of a user error.

    Our own messages are shown as written; Hydra's and OmegaConf's multi-line reports are
    joined into one line without their ``full_key``/``object_type`` footers.
    """
    if isinstance(err, (CompactHydraException, OmegaConfBaseException)):
        parts = [str(err)]
        if isinstance(err.__cause__, OmegaConfBaseException):
            parts.append(str(err.__cause__))
        lines = [
            line.strip()
            for part in parts
            for line in part.splitlines()
            if line.strip()
            and not line.strip().startswith(("full_key:", "object_type=", "reference_type="))
        ]
        text = " ".join(lines)
    else:
        text = str(err) or type(err).__name__
    if where:
        text = f"{text} (while building {where})"
    return text
