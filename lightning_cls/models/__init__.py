"""Model registry and built-in models."""

from lightning_cls.models import airbench, mlp, resnet, simplecnn  # noqa: F401  (register built-ins)
from lightning_cls.models.preprocessing import (
    check_pretrained_preprocessing,
    pretrained_preprocessing,
)
from lightning_cls.models.registry import (
    create_model,
    fill_input_options,
    list_models,
    register_model,
)

__all__ = [
    "check_pretrained_preprocessing",
    "create_model",
    "fill_input_options",
    "list_models",
    "pretrained_preprocessing",
    "register_model",
]
