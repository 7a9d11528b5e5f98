"""The tiny recipe (tests/helpers/tiny.py) as the callback tests use it: SMALL data, a SimpleCNN
trained with SGD, a one-epoch trainer (seconds on a CPU)."""

from __future__ import annotations

import functools

import pytest

from helpers import SGD, SMALL, make_trainer
from helpers import make_data as _make_data
from helpers import make_module as _make_module
from lightning_cls.data import SyntheticDataModule
from lightning_cls.module import ClassificationModule


def make_data(**kwargs) -> SyntheticDataModule:
    return _make_data(SMALL, **kwargs)


def make_module(data: SyntheticDataModule | None = None, **model_kwargs) -> ClassificationModule:
    return _make_module(data or make_data(), optimizer=SGD, **model_kwargs)


@pytest.fixture
def tiny_data():
    return make_data


@pytest.fixture
def tiny_module():
    return make_module


@pytest.fixture
def tiny_trainer(tmp_path):
    return functools.partial(make_trainer, tmp_path)
