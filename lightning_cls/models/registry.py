"""Model registry: ``register_model``, ``create_model``, ``list_models``.

One ``Registry`` (``lightning_cls.registry``) of model builders: the built-ins register on import
with ``@register_model``, third-party packages through the ``lightning_cls.models`` entry-point
group (read on the first lookup). A builder takes ``num_classes``, ``in_channels``,
``image_size`` and its own keyword options and returns an ``nn.Module``. Names not in the
registry fall back to torchvision's classification models, built with random weights (nothing
is downloaded).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from lightning_cls.registry import Registry

MODELS = Registry("model", "lightning_cls.models", returns=nn.Module)
# A builder's input options and the key of the data's spec each one follows.
INPUT_OPTIONS = {
    "num_classes": "classes",
    "in_channels": "num_channels",
    "image_size": "image_size",
}


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


def fill_input_options(model_kwargs: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """``model_kwargs`` with its null input options taken from the data's ``spec``.

    A model config says ``image_size: ${data.image_size}``; where the data config leaves that
    null (``data=streaming``: as stored; ``data=imagefolder``: one class per folder), the value
    exists only once the DataModule has read its data, and it reaches the network here:
    ``num_classes`` from ``len(spec["classes"])``, ``in_channels`` from ``num_channels``,
    ``image_size`` from ``image_size``. Options the config sets are kept; options a builder
    does not take (absent keys) stay absent. The module, ``inspect_model`` and everything that
    rebuilds a network from the module's hyperparameters see the filled values.
    """
    kwargs = dict(model_kwargs)
    for option, key in INPUT_OPTIONS.items():
        if option not in kwargs or kwargs[option] is not None:
            continue
        value = spec.get(key)
        if value is None:
            data_option = "num_classes" if option == "num_classes" else key
            raise ValueError(
                f"model.{option} is null and the data does not give it; set "
                f"data.{data_option} or model.{option}."
            )
        kwargs[option] = len(value) if option == "num_classes" else int(value)
    return kwargs
