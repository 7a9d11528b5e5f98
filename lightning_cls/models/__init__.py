"""Model registry and built-in models."""

from lightning_cls.models import airbench, mlp, resnet, simplecnn  # noqa: F401  (register built-ins)
from lightning_cls.models.registry import create_model, list_models, register_model

__all__ = ["create_model", "list_models", "register_model"]
