"""``Registry``: name → builder, the one mechanism behind every plug-in kind: models, datasets,
callbacks, tasks, export formats (``export.writer.FORMATS``) and runtimes
(``inference.runtimes.RUNTIMES``, keyed by file suffix).

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

A *lazy entry* names its builder as ``"package.module:attribute"`` instead
(``FORMATS.register("onnx", "lightning_cls.export.onnx:OnnxWriter")``): the name is known at
once, the module is imported on the first ``get`` of that name, so listing names or importing
the registry never pays for torch or onnx.

Entry points are read once, on the first lookup. A name registered twice (by two packages, or
by a package and a built-in) is an error; an unknown name lists the known ones and the closest.
This module imports neither torch nor Lightning: it is the base layer.
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
import logging
from collections.abc import Callable, Iterable, Iterator
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

Builder = Callable[..., Any]


class Lazy(str):
    """A builder named by ``"package.module:attribute"``, imported on first use."""

    def load(self) -> Builder:
        module, _, attribute = self.partition(":")
        obj: Any = importlib.import_module(module)
        for part in attribute.split("."):
            obj = getattr(obj, part)
        return obj

    def names(self, builder: object) -> bool:
        """Whether ``builder`` is the object this entry names (without importing it)."""
        return (
            self == f"{getattr(builder, '__module__', '')}:{getattr(builder, '__qualname__', '')}"
        )


class Registry:
    """Builders of one kind by name, filled by ``register`` and by an entry-point group.

    ``returns`` (optional) is the type every built object must have; a builder that returns
    something else is reported with a ``TypeError`` naming it. Read like a mapping too
    (``registry[name]``, ``in``, iteration and ``items()`` in registration order, ``pop``),
    so a table such as ``RUNTIMES`` keeps its dict verbs.
    """

    def __init__(self, kind: str, group: str, returns: type | tuple[type, ...] | None = None):
        self.kind, self.group, self.returns = kind, group, returns
        self._builders: dict[str, Builder] = {}
        self._entry_points_read = False
        self._clashes: list[str] = []

    def register(self, name: str | Builder | None = None, target: str | None = None):
        """Decorator: register a builder under ``name`` (default: its ``__name__``).

        Use as ``@registry.register``, ``@registry.register("name")`` or
        ``registry.register("name")(SomeClass)``; ``registry.register("name", "pkg.mod:attr")``
        adds a lazy entry (imported on first use). Registering the same object again (or the
        object a lazy entry names) is a no-op; another object under a taken name is a
        ``ValueError``.
        """
        if target is not None:
            if not isinstance(name, str) or ":" not in target:
                raise ValueError(
                    f"A lazy {self.kind} entry is register('name', 'package.module:attribute'); "
                    f"got {name!r}, {target!r}."
                )
            self._add(name, Lazy(target))
            return None

        def decorator(builder: Builder) -> Builder:
            key = builder.__name__ if name is None or callable(name) else name
            self._add(key, builder)
            return builder

        return decorator(name) if callable(name) else decorator

    def _add(self, key: str, builder: Builder) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError(f"A {self.kind} name must be a non-empty string, got {key!r}.")
        if not callable(builder) and not isinstance(builder, Lazy):
            raise TypeError(
                f"{self.kind.capitalize()} '{key}': register a builder function or a class, "
                f"not a {type(builder).__name__} ({builder!r})."
            )
        known = self._builders.get(key)
        if isinstance(known, Lazy) and known.names(builder):
            known = builder  # the module a lazy entry names registers itself as it loads
        if isinstance(builder, Lazy) and known is not None and builder.names(known):
            return  # a lazy entry for what is already registered
        if known is not None and known is not builder and known != builder:
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
        builder = self._builders[name]
        if isinstance(builder, Lazy):
            builder = self._builders[name] = builder.load()
        return builder

    # Mapping verbs, in registration order (a lazy entry is imported when read).
    def __getitem__(self, name: str) -> Builder:
        if name not in self:
            raise KeyError(name)
        return self.get(name)

    def __setitem__(self, name: str, builder: Builder) -> None:
        self._add(name, builder)

    def __delitem__(self, name: str) -> None:
        del self._builders[name]

    def __iter__(self) -> Iterator[str]:
        self.load_entry_points()
        return iter(list(self._builders))

    def __len__(self) -> int:
        self.load_entry_points()
        return len(self._builders)

    def items(self) -> list[tuple[str, Builder]]:
        return [(name, self.get(name)) for name in self]

    def pop(self, name: str, *default: Any) -> Any:
        """Remove ``name`` (a test's temporary entry); its builder, or ``default``."""
        return self._builders.pop(name, *default)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._builders)})"

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
    if isinstance(obj, Lazy):
        return str(obj)
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def _type_names(types: type | tuple[type, ...]) -> str:
    types = types if isinstance(types, tuple) else (types,)
    return " or ".join(f"{t.__module__}.{t.__qualname__}" for t in types)
