"""Model registry: ``register_model``, ``create_model``, ``list_models``.

One ``Registry`` (``lightning_cls.registry``) of model builders: the built-ins register on import
with ``@register_model``, third-party packages through the ``lightning_cls.models`` entry-point
group (read on the first lookup). A builder takes ``num_classes``, ``in_channels``,
``image_size`` and its own keyword options and returns an ``nn.Module``. Names not in the
registry fall back to torchvision's classification models, built with random weights (nothing
is downloaded).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from lightning_cls.registry import Registry

MODELS = Registry("model", "lightning_cls.models", returns=nn.Module)


def register_model(name: str | Callable | None = None):
    """Register a model builder (function or ``nn.Module`` class) under ``name`` (default: its
    ``__name__``). Use as ``@register_model`` or ``@register_model("my_net")``; a name
    registered twice is a ``ValueError``."""
    return MODELS.register(name)


def list_models(pattern: str | None = None) -> list[str]:
    """Sorted names of registered models, optionally filtered by a glob ``pattern``."""
    return MODELS.names(pattern)


def _torchvision_names() -> list[str]:
    import torchvision

    return torchvision.models.list_models(module=torchvision.models)


def create_model(name: str, source: str | None = None, **kwargs) -> nn.Module:
    """Build the model registered as ``name`` (or a torchvision classifier of that name).

    ``source="torchvision"`` (or ``"timm"``) skips the registry and builds that library's
    ``name``, so ``resnet18`` can mean torchvision's ImageNet ResNet-18 rather than ours.
    """
    if source is not None:
        from lightning_cls.models.torchvision_models import build_from_library

        return build_from_library(source, name, **kwargs)
    if name in MODELS:
        return MODELS.create(name, **kwargs)
    if name in _torchvision_names():
        from lightning_cls.models.torchvision_models import build_torchvision_model

        return build_torchvision_model(name, **kwargs)
    raise MODELS.unknown(
        name,
        also=_torchvision_names(),
        note=" (or any torchvision classification model name, e.g. mobilenet_v3_small)",
    )
