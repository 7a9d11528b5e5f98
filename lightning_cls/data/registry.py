"""Dataset registry: ``register_dataset``, ``create_dataset``, ``list_datasets``.

The same ``Registry`` as models and callbacks. Every built-in DataModule registers itself under
the name of its config (``conf/data/<name>.yaml``); a third-party package adds its own through
the ``lightning_cls.datasets`` entry-point group, and ``data=custom data.name=<name>`` trains on
it. A builder (a ``LightningDataModule`` class or a function returning one) takes the common
data options (``batch_size``, ``val_size``, ``augment``, ...) and its own as keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable

import pytorch_lightning as pl

from lightning_cls.registry import Registry

DATASETS = Registry("dataset", "lightning_cls.datasets", returns=pl.LightningDataModule)


def register_dataset(name: str | Callable | None = None):
    """Register a DataModule class (or a function returning one) under ``name``."""
    return DATASETS.register(name)


def create_dataset(name: str, **kwargs) -> pl.LightningDataModule:
    """Build the DataModule registered as ``name`` with ``kwargs``."""
    return DATASETS.create(name, **kwargs)


def list_datasets(pattern: str | None = None) -> list[str]:
    """Sorted names of registered datasets, optionally filtered by a glob ``pattern``."""
    return DATASETS.names(pattern)
