"""Model registry and built-in models."""

from lightning_cls.models import airbench, mlp, resnet, simplecnn  # noqa: F401  (register built-ins)
from lightning_cls.models.registry import (
    create_model,
    fill_input_options,
    list_models,
    register_model,
)

__all__ = [
    "create_model",
    "fill_input_options",
    "list_models",
    "pretrained_preprocessing",
    "register_model",
]


def pretrained_preprocessing(model_kwargs: dict) -> dict | None:
    """The input pretrained weights were trained with (mean, std, ``image_size`` crop and
    ``decode_size`` resize), from a model config: ``source=torchvision`` with ``weights`` (the
    enum's ``transforms()``) or ``source=timm`` with ``pretrained``/``weights_path`` (timm's
    ``pretrained_cfg``); None for random weights or a bare ``weights_path`` of unknown origin."""
    source, name = model_kwargs.get("source"), model_kwargs.get("name")
    if source == "torchvision" and model_kwargs.get("weights"):
        from lightning_cls.models.torchvision_models import preprocessing

        return preprocessing(name, model_kwargs["weights"])
    if source == "timm" and (model_kwargs.get("pretrained") or model_kwargs.get("weights_path")):
        from lightning_cls.models.timm_models import preprocessing

        return preprocessing(name)
    return None
