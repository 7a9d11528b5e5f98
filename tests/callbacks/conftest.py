"""The tiny recipe (tests/helpers/tiny.py) as the callback tests use it: SMALL data, a SimpleCNN
trained with SGD, a one-epoch trainer (seconds on a CPU)."""

from __future__ import annotations

import functools

import pytest

from helpers import SGD, make_data, make_module, make_trainer


@pytest.fixture
def tiny_data():
    return make_data


@pytest.fixture
def tiny_module():
    return functools.partial(make_module, optimizer=SGD)


@pytest.fixture
def tiny_trainer(tmp_path):
    return functools.partial(make_trainer, tmp_path)
