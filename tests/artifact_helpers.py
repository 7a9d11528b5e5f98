"""The names tests imported before ``tests/helpers/`` held the tiny recipe (kept importable).

``make_data`` / ``make_module`` here keep their old defaults: the LEARNABLE data and a SimpleCNN
[8, 16] wide, as the trained model has.
"""

from __future__ import annotations

from pathlib import Path

from helpers import (
    LEARNABLE,
    Artifacts,
    Trained,
    as_overrides,
    fit,
    png_bytes,
    trained_artifacts,
)
from helpers import make_data as _make_data
from helpers import make_module as _make_module
from lightning_cls.data import SyntheticDataModule
from lightning_cls.module import ClassificationModule

# The `trained` fixture's data as Hydra overrides (INT8 calibrates on what it learned).
SYNTHETIC_OVERRIDES = as_overrides(LEARNABLE)

__all__ = ["SYNTHETIC_OVERRIDES", "Artifacts", "Trained", "fit", "make_artifacts", "png_bytes"]


def make_data(**kwargs) -> SyntheticDataModule:
    return _make_data(LEARNABLE, **kwargs)


def make_module(
    data: SyntheticDataModule, model_name: str = "simplecnn", **model_kwargs
) -> ClassificationModule:
    if model_name == "simplecnn":
        model_kwargs = {"widths": [8, 16], "hidden": 32, **model_kwargs}
    return _make_module(data, model_name, **model_kwargs)


def make_artifacts(root: Path, tta_flip: bool = True, tta_translate: int = 1) -> Artifacts:
    """The TTA model and its exports, built once per test process (``trained_artifacts``)."""
    return trained_artifacts(root, tta_flip, tta_translate)
