"""Plug-in registries for callbacks and datasets, discovered through Python entry points.

Same verbs and the same lazy discovery as the model registry (``lightning_cls.models``):
a third-party package declares, in its ``pyproject.toml``::

    [project.entry-points."lightning_cls.callbacks"]
    epoch_timer = "my_package:EpochTimer"

and ``create_callback("epoch_timer", **kwargs)`` builds it. The entry point may name a class
or factory (registered under the entry-point name) or a module that registers on import.
Built-in callbacks are registered here under their short names through the same registry.
"""

from __future__ import annotations

import difflib
import fnmatch
import logging
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

log = logging.getLogger(__name__)


class PluginRegistry:
    """Name → factory, filled by ``register`` and, on first lookup, by an entry-point group."""

    def __init__(self, group: str, kind: str):
        self.group, self.kind = group, kind
        self._factories: dict[str, Callable[..., Any]] = {}
        self._loaded = False

    def register(self, name: str | Callable | None = None):
        def decorator(factory: Callable[..., Any]) -> Callable[..., Any]:
            key = factory.__name__ if name is None or callable(name) else name
            known = self._factories.get(key)
            if known is not None and known is not factory:
                raise ValueError(
                    f"{self.kind.capitalize()} name '{key}' is already registered by "
                    f"{known.__module__}; choose another name."
                )
            self._factories[key] = factory
            return factory

        return decorator(name) if callable(name) else decorator

    def load_plugins(self, reload: bool = False) -> None:
        if self._loaded and not reload:
            return
        self._loaded = True
        for ep in entry_points(group=self.group):
            try:
                obj = ep.load()
            except Exception as err:  # a broken plug-in must not break the built-ins
                log.warning("Could not load %s plug-in %r (%s): %s", self.kind, ep.name, ep.value, err)
                continue
            if callable(obj) and ep.name not in self._factories:
                self.register(ep.name)(obj)

    def names(self, pattern: str | None = None) -> list[str]:
        self.load_plugins()
        names = sorted(self._factories)
        return [n for n in names if fnmatch.fnmatch(n, pattern)] if pattern else names

    def create(self, name: str, **kwargs) -> Any:
        self.load_plugins()
        if name not in self._factories:
            known = self.names()
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise ValueError(
                f"Unknown {self.kind} '{name}'.{hint} Known: {', '.join(known) or '(none)'}. "
                f"Plug-ins register through the '{self.group}' entry-point group."
            )
        return self._factories[name](**kwargs)


CALLBACKS = PluginRegistry("lightning_cls.callbacks", "callback")
DATASETS = PluginRegistry("lightning_cls.datasets", "dataset")

register_callback = CALLBACKS.register
register_dataset = DATASETS.register


def create_callback(name: str, **kwargs):
    """Build the callback registered (or plugged in) as ``name``."""
    _register_builtins()
    return CALLBACKS.create(name, **kwargs)


def list_callbacks(pattern: str | None = None) -> list[str]:
    _register_builtins()
    return CALLBACKS.names(pattern)


def create_dataset(name: str, **kwargs):
    """Build the DataModule registered (or plugged in) as ``name``."""
    _register_builtins()
    return DATASETS.create(name, **kwargs)


def list_datasets(pattern: str | None = None) -> list[str]:
    _register_builtins()
    return DATASETS.names(pattern)


def _register_builtins() -> None:
    """The built-ins go through the same registry as plug-ins (imported lazily: torchvision
    and Lightning are heavy)."""
    if CALLBACKS._factories.get("nan_guard"):
        return
    from lightning_cls import callbacks, data

    for name, cls in {
        "atomic_checkpoint": callbacks.AtomicModelCheckpoint, "compile": callbacks.CompileModel,
        "data_wait": callbacks.DataWaitProfiler, "grad_norm": callbacks.GradNormLogger,
        "lr_finder": callbacks.LRFinderPlot, "mixup": callbacks.MixupCutmix,
        "model_weights": callbacks.SaveModelWeights, "nan_guard": callbacks.NanGuard,
        "oom": callbacks.OOMAdvisor, "plots": callbacks.TrainingPlots,
        "rng_state": callbacks.RngState, "shape_check": callbacks.ShapeCheck,
        "unused_params": callbacks.UnusedParameterFinder, "wall_clock": callbacks.WallClock,
    }.items():  # fmt: skip
        CALLBACKS.register(name)(cls)
    for name, cls in {"synthetic": data.SyntheticDataModule, "digits": data.DigitsDataModule}.items():
        DATASETS.register(name)(cls)
