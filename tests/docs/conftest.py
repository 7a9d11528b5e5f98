"""One pre-imported fork server per test process for the docs pages' commands (fork_server.py)."""

from __future__ import annotations

import os

import pytest
from fork_server import ForkServer

# The environment every page runs in (and the server that runs its commands starts in).
DOCS_ENV = {"OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="session")
def docs_env() -> dict:
    return {**os.environ, **DOCS_ENV}


@pytest.fixture(scope="session")
def fork_server(docs_env):
    """Started on first use and kept for the session: each page's commands pay no import."""
    server = ForkServer(docs_env)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
