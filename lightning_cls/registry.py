"""``Registry``: name → builder, the one mechanism behind models, datasets and callbacks.

What may be registered, for every kind alike: a *builder*, i.e. any callable that takes keyword
options and returns the object — a function or a class (a class is its own builder). The
built-ins register with the same decorator a third-party package may call::

    @register_model("tinynet")
    def build_tinynet(num_classes: int = 10, **kwargs) -> nn.Module: ...

A package that does not want to be imported by hand declares an entry point in its
``pyproject.toml`` instead, in the group of the kind (``lightning_cls.models``,
``lightning_cls.datasets``, ``lightning_cls.callbacks``)::

    [project.entry-points."lightning_cls.models"]
    tinynet = "my_package:build_tinynet"    # a builder: registered under the entry-point name
    extras = "my_package.models"            # a module: imported, it registers its own names

Entry points are read once, on the first lookup. A name registered twice (by two packages, or
by a package and a built-in) is an error; an unknown name lists the known ones and the closest.
This module imports neither torch nor Lightning: it is the base layer.
"""

from __future__ import annotations

import difflib
import fnmatch
import logging
from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

Builder = Callable[..., Any]


class Registry:
    """Builders of one kind by name, filled by ``register`` and by an entry-point group.

    ``returns`` (optional) is the type every built object must have; a builder that returns
    something else is reported with a ``TypeError`` naming it.
    """

    def __init__(self, kind: str, group: str, returns: type | tuple[type, ...] | None = None):
        self.kind, self.group, self.returns = kind, group, returns
        self._builders: dict[str, Builder] = {}
        self._entry_points_read = False
        self._clashes: list[str] = []

    def register(self, name: str | Builder | None = None) -> Callable[[Builder], Builder]:
        """Decorator: register a builder under ``name`` (default: its ``__name__``).

        Use as ``@registry.register``, ``@registry.register("name")`` or
        ``registry.register("name")(SomeClass)``. Registering the same object again is a
        no-op; another object under a taken name is a ``ValueError``.
        """

        def decorator(builder: Builder) -> Builder:
            key = builder.__name__ if name is None or callable(name) else name
            self._add(key, builder)
            return builder

        return decorator(name) if callable(name) else decorator

    def _add(self, key: str, builder: Builder) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError(f"A {self.kind} name must be a non-empty string, got {key!r}.")
        if not callable(builder):
            raise TypeError(
                f"{self.kind.capitalize()} '{key}': register a builder function or a class, "
                f"not a {type(builder).__name__} ({builder!r})."
            )
        known = self._builders.get(key)
        if known is not None and known is not builder:
            raise ValueError(
                f"{self.kind.capitalize()} name '{key}' is already registered by "
                f"{_origin(known)}; {_origin(builder)} must choose another name."
            )
        self._builders[key] = builder

    def load_entry_points(self, reload: bool = False) -> None:
        """Import the group's entry points (once, unless ``reload``).

        A plug-in that fails to import is logged and skipped so it cannot break the others; a
        plug-in whose name is taken is a ``ValueError`` at every lookup until one is renamed
        (or uninstalled), after every other entry point was read.
        """
        if not self._entry_points_read or reload:
            self._entry_points_read = True
            self._clashes = [
                msg for ep in entry_points(group=self.group) if (msg := self._load(ep))
            ]
        if self._clashes:
            raise ValueError(" ".join(self._clashes))

    def _load(self, ep) -> str | None:
        """Register one entry point; return the clash message if its name is taken."""
        try:
            obj = ep.load()
        except Exception as err:  # noqa: BLE001  (third-party code can raise anything)
            log.warning("Could not load %s plug-in %r (%s): %s", self.kind, ep.name, ep.value, err)
            return None
        if isinstance(obj, ModuleType):
            return None  # the module registered its builders when it was imported
        if not callable(obj):
            log.warning(
                "%s plug-in %r (%s) is a %s; an entry point must name a builder function, a "
                "class or a module.",
                self.kind.capitalize(),
                ep.name,
                ep.value,
                type(obj).__name__,
            )
            return None
        try:
            self._add(ep.name, obj)
        except ValueError as err:
            return str(err)
        return None

    def __contains__(self, name: object) -> bool:
        self.load_entry_points()
        return name in self._builders

    def names(self, pattern: str | None = None) -> list[str]:
        """Sorted registered names, optionally filtered by a glob ``pattern`` (``"res*"``)."""
        self.load_entry_points()
        names = sorted(self._builders)
        return [n for n in names if fnmatch.fnmatch(n, pattern)] if pattern else names

    def get(self, name: str) -> Builder:
        """The builder registered as ``name``; ``ValueError`` naming the closest known name."""
        if name not in self:
            raise self.unknown(name)
        return self._builders[name]

    def create(self, name: str, **kwargs: Any) -> Any:
        """Build the object registered as ``name`` with ``kwargs``."""
        builder = self.get(name)
        obj = builder(**kwargs)
        if self.returns is not None and not isinstance(obj, self.returns):
            raise TypeError(
                f"{self.kind.capitalize()} '{name}' ({_origin(builder)}) returned a "
                f"{type(obj).__name__}; a {self.kind} builder must return {_type_names(self.returns)}."
            )
        return obj

    def unknown(self, name: str, also: Iterable[str] = (), note: str = "") -> ValueError:
        """The error for an unknown ``name``: the closest match among the registered names (and
        ``also``), the registered names, ``note``, and where plug-ins come from."""
        known = self.names()
        close = difflib.get_close_matches(str(name), known + list(also), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        return ValueError(
            f"Unknown {self.kind} '{name}'.{hint} Known: {', '.join(known) or '(none)'}{note}. "
            f"Plug-ins add names through the '{self.group}' entry-point group."
        )


def _origin(obj: object) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def _type_names(types: type | tuple[type, ...]) -> str:
    types = types if isinstance(types, tuple) else (types,)
    return " or ".join(f"{t.__module__}.{t.__qualname__}" for t in types)
