"""Model registry: ``register_model``, ``create_model``, ``list_models``.

Built-in models register themselves on import; third-party packages add theirs through the
``lightning_cls.models`` entry-point group, discovered lazily on first lookup (the same
mechanism the built-ins could use). Names not in the registry fall back to torchvision's
classification models, built with random weights (nothing is downloaded).
"""

from __future__ import annotations

import difflib
import fnmatch
import logging
from collections.abc import Callable
from importlib.metadata import entry_points

from torch import nn

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "lightning_cls.models"

_REGISTRY: dict[str, Callable[..., nn.Module]] = {}
_plugins_loaded = False


def register_model(name: str | Callable | None = None):
    """Register a model builder under ``name`` (default: the function's name).

    Use as ``@register_model`` or ``@register_model("my_net")``. A builder takes keyword
    arguments (``num_classes``, ``in_channels``, ``image_size`` and its own) and returns an
    ``nn.Module``. Registering a name twice is an error.
    """

    def decorator(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        key = fn.__name__ if name is None or callable(name) else name
        if key in _REGISTRY and _REGISTRY[key] is not fn:
            raise ValueError(
                f"Model name '{key}' is already registered by {_REGISTRY[key].__module__}; "
                "choose another name."
            )
        _REGISTRY[key] = fn
        return fn

    return decorator(name) if callable(name) else decorator


def _load_plugins() -> None:
    """Import every ``lightning_cls.models`` entry point once (lazy discovery)."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as err:  # a broken plug-in must not break the built-ins
            log.warning("Could not load model plug-in %r (%s): %s", ep.name, ep.value, err)
            continue
        # An entry point may name a builder function directly or a module that registers.
        if callable(obj) and not isinstance(obj, type) and ep.name not in _REGISTRY:
            register_model(ep.name)(obj)


def list_models(pattern: str | None = None) -> list[str]:
    """Sorted names of registered models, optionally filtered by a glob ``pattern``."""
    _load_plugins()
    names = sorted(_REGISTRY)
    return [n for n in names if fnmatch.fnmatch(n, pattern)] if pattern else names


def _torchvision_names() -> list[str]:
    import torchvision

    return torchvision.models.list_models(module=torchvision.models)


def create_model(name: str, **kwargs) -> nn.Module:
    """Build the model registered as ``name`` (or a torchvision classifier of that name)."""
    _load_plugins()
    if name in _REGISTRY:
        return _REGISTRY[name](**kwargs)
    if name in _torchvision_names():
        from lightning_cls.models.torchvision_models import build_torchvision_model

        return build_torchvision_model(name, **kwargs)
    known = list_models()
    close = difflib.get_close_matches(name, known + _torchvision_names(), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    raise ValueError(
        f"Unknown model '{name}'.{hint} Known: {', '.join(known)} "
        "(or any torchvision classification model name, e.g. mobilenet_v3_small)."
    )
