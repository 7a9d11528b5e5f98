"""Callback registry: ``register_callback``, ``create_callback``, ``list_callbacks``.

The same ``Registry`` as models and datasets. The built-in callbacks are registered below under
their module names; a third-party package adds its own through the ``lightning_cls.callbacks``
entry-point group. On the command line a registered callback is switched on by name::

    '+callbacks.timer={_target_: lightning_cls.callbacks.registry.create_callback, name: epoch_timer}'

(any importable callback class also works directly as ``_target_``; docs/architecture.md says
when to use which).
"""

from __future__ import annotations

from collections.abc import Callable

import pytorch_lightning as pl

from lightning_cls import callbacks as builtin
from lightning_cls.registry import Registry

CALLBACKS = Registry("callback", "lightning_cls.callbacks", returns=pl.Callback)


def register_callback(name: str | Callable | None = None):
    """Register a ``Callback`` class (or a function returning one) under ``name``."""
    return CALLBACKS.register(name)


def create_callback(name: str, **kwargs) -> pl.Callback:
    """Build the callback registered as ``name`` with ``kwargs``."""
    return CALLBACKS.create(name, **kwargs)


def list_callbacks(pattern: str | None = None) -> list[str]:
    """Sorted names of registered callbacks, optionally filtered by a glob ``pattern``."""
    return CALLBACKS.names(pattern)


def _register_builtins() -> None:
    """Each built-in callback lives in its own module (one per file) and is registered under
    that module's name: ``NanGuard`` in ``callbacks/nan_guard.py`` is ``nan_guard``.

    ``BestMetric``, ``OptunaPruning`` (both added by train.py itself) and
    ``BackboneFinetuning`` are not re-exported by the package, so they are listed here."""
    from lightning_cls.callbacks.best_metric import BestMetric
    from lightning_cls.callbacks.finetune import BackboneFinetuning
    from lightning_cls.callbacks.optuna_pruning import OptunaPruning

    extra = [BestMetric, OptunaPruning, BackboneFinetuning]
    for obj in [getattr(builtin, attribute) for attribute in builtin.__all__] + extra:
        if isinstance(obj, type) and issubclass(obj, pl.Callback):
            register_callback(obj.__module__.rsplit(".", 1)[-1])(obj)


_register_builtins()
