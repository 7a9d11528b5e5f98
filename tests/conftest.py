"""Shared fixtures for the whole suite."""

from __future__ import annotations

import os

import pytest
import torch

from hydra_helpers import QUIET_TRAINER

# Tests run two at a time on two cores (pytest -n 2): one intra-op thread each.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _single_thread():
    """One intra-op thread per test, restored afterwards (code under test may change it)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def quiet_trainer() -> list[str]:
    return list(QUIET_TRAINER)
