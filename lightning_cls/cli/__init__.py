"""``run_cli(main)``: how every entry point ends — a user error in one line, a bug in a traceback.

Each ``python -m lightning_cls.<tool>`` calls ``run_cli(main)`` under ``if __name__ ==
"__main__"``. A wrong setting (a bad value, a missing file, an unknown config key) then ends
with one line on stderr that names it, and exit code 1; ``HYDRA_FULL_ERROR=1`` or ``debug=true``
on the command line shows the full traceback instead. Any other exception is a bug and keeps
its traceback. Part of the entry-point layer: it knows Hydra's exception types.

Before Hydra sees the command line, ``run_cli`` also: answers an argparse-style flag
(``--epochs 3``) with the override it stands for; adds ``./conf`` (the working folder's own
config files) to the search path, after the packaged configs (``user_config_override``); spells
a renamed key (serve's ``artifact=``) as its new name, with one warning line (``renamed.py``); hides
Lightning's tips unless ``verbose=true`` (``quiet.py``). After a user error it removes the run
folder the command had just made if nothing but Hydra's files is in it, and words an unknown key
or group option as the closest one (``suggest.py``).
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from hydra.errors import (
    CompactHydraException,
    ConfigCompositionException,
    InstantiationException,
    MissingConfigException,
)
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from lightning_cls.cli import quiet, suggest
from lightning_cls.cli.renamed import renamed

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
# verbose=true (a key of every command's config): the full config tree, Lightning's tips.
VERBOSE_FLAGS = ("verbose=true", "verbose=True", "verbose=1")
# Set for child processes (DDP re-launches the command) so they report like their parent.
_FULL_ERROR_ENV = "LIGHTNING_CLS_FULL_ERROR"


def run_cli(main: Callable[[], Any]) -> None:
    """Call a ``@hydra.main`` function; report a user error as one line and exit 1."""
    started = time.time()
    args = [a for a in sys.argv[1:] if a not in DEBUG_FLAGS]
    full = _full_error_requested(debug=len(args) < len(sys.argv) - 1)
    config_name = _config_name(main)
    args = renamed(config_name, args)  # artifact= -> ckpt_path= (serve), with one warning line
    if not full and suggest.unknown_flag(args) is not None:
        keys = suggest.flat_keys(_composed(config_name, args) or {})
        sys.stderr.write(f"error: {suggest.flag_hint(args, keys or None)}\n")
        sys.exit(1)
    sys.argv = [sys.argv[0], *_with_overrides(args, user_config_override(args))]
    os.environ[_FULL_ERROR_ENV] = "1" if full else "0"
    # Hydra prints its own shortened traceback unless HYDRA_FULL_ERROR=1: let the error reach
    # us instead, and decide here how to show it.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    if any(a in HELP_FLAGS for a in args):  # Hydra's help text, without its repository copies
        from lightning_cls.cli import command_help  # only for --help
        from lightning_cls.cli.hydra_help import share_group_repository

        share_group_repository()
        command_help.register()  # ${command_help:} in conf/hydra/default.yaml's help template
    try:
        verbose = any(a in VERBOSE_FLAGS for a in args)
        with quiet.lightning_messages(verbose):
            with nullcontext() if full else quiet.drop_hydra_job_line():
                main()
    except (*USER_ERRORS, ImportError) as err:
        if full:
            raise
        cause = _user_cause(err)
        if cause is None:
            raise  # a bug wrapped by instantiate: keep the traceback
        quiet.remove_failed_run(made_after=started)
        where = _config_key(err)
        hint = _closest(err, cause, where, config_name, sys.argv[1:])
        sys.stderr.write(f"error: {hint or describe(cause, where=where)}\n")
        sys.exit(1)


def user_config_override(args: list[str]) -> list[str]:
    """``hydra.searchpath=[file://<cwd>/conf]`` when the working folder has a ``conf/`` of its
    own (and the command line sets no search path): ``experiment=mine`` then finds
    ``./conf/experiment/mine.yaml``, ``data=photos`` ``./conf/data/photos.yaml``. Hydra appends
    it after the packaged configs, so a file named like a packaged one is not used: give it
    another name, or run with ``--config-dir conf`` (searched first) to replace a packaged file."""
    from lightning_cls import config_dir

    conf = Path.cwd() / "conf"
    if not conf.is_dir() or any("hydra.searchpath" in a for a in args):
        return []
    if conf.resolve() == Path(config_dir()).resolve():  # a checkout: the packaged configs
        return []
    path = f"file://{conf.resolve()}".replace("\\", "\\\\").replace("'", "\\'")
    return [f"hydra.searchpath=['{path}']"]


def _with_overrides(args: list[str], extra: list[str]) -> list[str]:
    """``args`` with ``extra`` overrides next to its own (argparse takes one run of them)."""
    first = next((i for i, a in enumerate(args) if "=" in a and not a.startswith("-")), len(args))
    return [*args[:first], *extra, *args[first:]]


def _config_name(main: Callable) -> str | None:
    """The primary config of a ``@hydra.main`` function (None for any other callable)."""
    try:
        return inspect.getclosurevars(main).nonlocals.get("config_name")
    except (TypeError, ValueError):
        return None


def _composed(config_name: str | None, args: list[str], leave_out: str = "") -> dict | None:
    """The command's config as nested dicts (unresolved), composed with the command line's
    overrides but ``leave_out``'s (with none, when those fail too); None when it cannot be."""
    if config_name is None:
        return None
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from lightning_cls import config_dir

    overrides = [a for a in args if not a.startswith("-") and _key(a) != leave_out and "=" in a]
    searchpath = [a for a in overrides if a.startswith("hydra.searchpath")]
    for attempt in (overrides, searchpath):
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
                cfg = compose(config_name=config_name, overrides=attempt)
                return OmegaConf.to_container(cfg, resolve=False)
        except Exception:  # noqa: BLE001 - a suggestion is a bonus: never a second error
            continue
    return None


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _closest(
    err: BaseException, cause: BaseException, where: str | None, config_name: str | None,
    args: list[str],
) -> str:  # fmt: skip
    """The error worded as the closest key or option (``suggest.py``), or "" to word it as
    Hydra and the constructors do."""
    if isinstance(cause, MissingConfigException) and cause.options and cause.missing_cfg_file:
        group, _, option = cause.missing_cfg_file.rpartition("/")
        if group:
            return suggest.unknown_option(group, option, list(cause.options))
    found = re.match(r"Could not override '([^']+)'", str(cause))
    if isinstance(cause, ConfigCompositionException) and found:
        if isinstance(cause.__cause__, (ConfigAttributeError, ConfigKeyError)):
            key = found.group(1)
            config = _composed(config_name, args, leave_out=key)
            return suggest.unknown_key(key, config, _targets(config, key.rpartition(".")[0]))
    keyword = suggest.unexpected_keyword(str(cause))
    target = re.search(r"target '([^']+)'", str(err))
    if isinstance(cause, TypeError) and keyword and where and target:
        key = f"{where}.{keyword}"
        accepted = suggest.keyword_arguments(target.group(1))
        config = _composed(config_name, args, leave_out=key)
        if config is None:  # not composed by a command: the constructor's arguments alone
            config = {}
            suggest.nest(config, where, dict.fromkeys(accepted))
        return suggest.unknown_key(key, config, {where: accepted})
    return ""


def _targets(config: dict | None, node: str) -> dict[str, list[str]]:
    """``{node: keyword arguments of node's _target_}`` when the config's own keys give no
    close match: importing the target (the Trainer: Lightning) costs seconds."""
    target = suggest.target_of(config, node)
    if not target:
        return {}
    return {node: _LazyArguments(target)}


class _LazyArguments:
    """A target's keyword arguments, imported on first iteration only."""

    def __init__(self, target: str):
        self.target = target

    def __iter__(self):
        return iter(suggest.keyword_arguments(self.target))


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
