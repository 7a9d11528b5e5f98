"""Shared fixtures for the whole suite (the factories behind them are in tests/helpers/)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# Tests run two at a time on two cores (pytest -n 2): one intra-op thread each (set before any
# test module imports torch). torch and the helpers are imported by the fixtures that use them:
# pytest -n 2's controller loads this file too, before it starts the workers, and runs no test.
os.environ.setdefault("OMP_NUM_THREADS", "1")

if TYPE_CHECKING:
    from helpers import Artifacts, Trained


def pytest_collection_modifyitems(config, items):
    """Modules with a ``slow`` test first, each module's tests still together and in order:
    pytest -n 2 hands tests out in this order, so the long ones start early on both workers
    instead of leaving one worker alone with a long test at the end (module fixtures are still
    built once per worker)."""
    slow_modules = {item.module.__name__ for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module.__name__ not in slow_modules)


_SECONDS_BY_FOLDER: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Sum each test's setup + call + teardown by test folder (in the xdist controller too)."""
    parts = report.nodeid.split("::")[0].split("/")
    folder = "/".join(parts[:2]) if len(parts) > 2 else parts[0]
    _SECONDS_BY_FOLDER[folder] = _SECONDS_BY_FOLDER.get(folder, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    """Where the suite's time goes: seconds per test folder (summed over the workers, so they
    add up to about workers x wall time), largest first; after --durations' slowest tests."""
    if len(_SECONDS_BY_FOLDER) < 2:
        return
    total = sum(_SECONDS_BY_FOLDER.values())
    terminalreporter.section("seconds per test folder (all workers)")
    for folder, seconds in sorted(_SECONDS_BY_FOLDER.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:8.1f} s {seconds / total:6.1%}  {folder}")
    terminalreporter.write_line(f"{total:8.1f} s          total")


@pytest.fixture(autouse=True)
def _single_thread():
    """One intra-op thread per test, restored afterwards (code under test may change it)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _restore_cli_env():
    """``run_cli`` sets HYDRA_FULL_ERROR and LIGHTNING_CLS_FULL_ERROR for the processes a command
    starts (DDP children). A test that calls it in-process must not hand them to later tests'
    subprocesses, whose user errors would then come with a traceback."""
    names = ("HYDRA_FULL_ERROR", "LIGHTNING_CLS_FULL_ERROR")
    saved = {name: os.environ.get(name) for name in names}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def quiet_trainer() -> list[str]:
    from helpers.hydra_configs import QUIET_TRAINER

    return list(QUIET_TRAINER)


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> Trained:
    """A SimpleCNN trained for a few seconds on synthetic data, shared by the export,
    inference and examples tests (built once per test process)."""
    from helpers import trained_model

    return trained_model(tmp_path_factory.mktemp("trained"))


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory) -> Artifacts:
    """A flip+translate-TTA SimpleCNN with its checkpoint, weights and exports, shared by the
    inference and serve tests (built once per test process)."""
    from helpers import trained_artifacts

    return trained_artifacts(tmp_path_factory.mktemp("artifacts"))


# The environment a command of the docs (or a test's command line) runs in, and the fork
# server that runs it starts in (an import-time variable that differs means a fresh interpreter).
FORK_ENV = {"OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="session")
def multilabel_squares(tmp_path_factory) -> Path:
    """The colour-square multi-label data (tests/helpers/multilabel.py), written once."""
    from helpers import multilabel

    return multilabel.squares(tmp_path_factory)


@pytest.fixture(scope="session")
def multilabel_run(tmp_path_factory) -> dict:
    """results.json of the one multi-label training of the process (5 epochs, ONNX export)."""
    from helpers import multilabel

    return multilabel.multilabel_run(tmp_path_factory)


@pytest.fixture(scope="session")
def fork_env() -> dict:
    return {**os.environ, **FORK_ENV}


@pytest.fixture(scope="session")
def fork_server(fork_env):
    """A Python that has imported torch, Lightning and Hydra and forks per command
    (tests/helpers/fork_server.py, fork_runner.py): ``python -m lightning_cls.*`` without ~8 s
    of imports. Started on first use, kept for the session."""
    from helpers.fork_runner import ForkServer

    server = ForkServer(fork_env)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def user_command(fork_server, fork_env):
    """``user_command(["-m", "lightning_cls.X", ...], cwd)``: the command as a user types it,
    forked from the pre-imported server: the same exit code and output as a fresh interpreter,
    in a user's environment (no HYDRA_FULL_ERROR: a user error ends in one line)."""
    env = {k: v for k, v in fork_env.items() if k != "HYDRA_FULL_ERROR"}

    def run(argv: list[str], cwd, timeout: float = 120):
        return fork_server.run(argv, cwd, env, timeout=timeout)

    return run
