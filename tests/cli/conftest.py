"""Fixtures of the tests that run a command's ``@hydra.main`` in-process through ``run_cli``."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _restore_root_logging():
    """A job run in-process configures logging (Hydra's job_logging) onto this test's captured
    streams; later tests' log records must not reach them once pytest has closed them."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)


@pytest.fixture
def user_env(monkeypatch):
    """A user's environment: no full-traceback switches (a user error ends in one line)."""
    for name in ("HYDRA_FULL_ERROR", "LIGHTNING_CLS_FULL_ERROR"):
        monkeypatch.delenv(name, raising=False)
