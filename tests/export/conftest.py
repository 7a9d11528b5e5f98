"""Composing the export config; the tiny trained model (``trained``) is in tests/conftest.py."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from helpers import LEARNABLE, fit, make_data, make_untrained

REPO = Path(__file__).resolve().parents[2]


def compose_export(overrides: list[str], tmp: Path):
    """The config ``python -m lightning_cls.export <overrides>`` builds, outputs under ``tmp``."""
    from hydra import compose, initialize_config_dir

    from lightning_cls import config_dir

    base = [f"paths.root_dir={tmp}", f"paths.output_dir={tmp}/run"]
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose(config_name="export", overrides=base + overrides)


@pytest.fixture
def helpers():
    """Factories for tests that train their own tiny model or compose the export config."""
    from types import SimpleNamespace

    return SimpleNamespace(
        make_data=functools.partial(make_data, LEARNABLE),  # the `trained` fixture's data
        make_module=make_untrained,
        fit=fit,
        compose=compose_export,
        repo=REPO,
    )
