"""Shared fixtures for the whole suite."""

from __future__ import annotations

import os

import pytest
import torch

from artifact_helpers import Trained, fit, make_data, make_module
from hydra_helpers import QUIET_TRAINER
from lightning_cls.inference import InputSpec

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


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> Trained:
    """A SimpleCNN trained for a few seconds on synthetic data, shared by the export and
    inference tests (built once per worker)."""
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    data = make_data()
    module = make_module(data)
    ckpt = fit(module, data, tmp_path_factory.mktemp("trained"))
    torch.set_num_threads(threads)
    return Trained(ckpt, module.eval(), data, InputSpec.from_hparams(module.hparams))
