"""Any timm model by name (optional extra: ``pip install lightning-cls[timm]``).

``model=timm model.name=convnext_tiny model.pretrained=true`` downloads timm's weights at the
user's site; offline, ``model.weights_path=/path/model.safetensors`` (or ``.pth``) is handed
to timm as ``pretrained_cfg_overlay=dict(file=...)``, so timm itself adapts the head to
``num_classes``. The model's ``pretrained_cfg`` says which input it expects (``preprocessing``).
"""

from __future__ import annotations

import math
from pathlib import Path

from torch import nn


def _timm():
    try:
        import timm
    except ImportError as err:
        raise ImportError(
            "model=timm needs the timm package: pip install 'lightning-cls[timm]' (or pip install timm)."
        ) from err
    return timm


def build_timm_model(
    name: str,
    num_classes: int = 1000,
    in_channels: int = 3,
    image_size: int | None = None,  # timm models take their input size from pretrained_cfg
    pretrained: bool = False,
    weights_path: str | None = None,
    **kwargs,
) -> nn.Module:
    """timm's ``name`` with ``num_classes`` outputs; ``weights_path`` loads local weights offline."""
    timm = _timm()
    if not timm.is_model(name):
        close = timm.list_models(f"*{name.split('_')[0]}*")[:5]
        hint = f" Similar: {', '.join(close)}." if close else ""
        raise ValueError(f"Unknown timm model '{name}'.{hint} See timm.list_models().")
    if weights_path is not None:
        path = Path(weights_path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(
                f"model.weights_path={path} does not exist; give a timm .safetensors or .pth file."
            )
        kwargs["pretrained_cfg_overlay"] = dict(file=str(path))
        pretrained = True
    try:
        return timm.create_model(
            name, pretrained=pretrained, num_classes=num_classes, in_chans=in_channels, **kwargs
        )
    except (OSError, RuntimeError) as err:
        if weights_path is not None:
            raise ValueError(
                f"Cannot load timm weights {weights_path} into '{name}': {err}"
            ) from err
        raise ConnectionError(
            f"Downloading timm weights for '{name}' failed ({type(err).__name__}: {err}). "
            "Without internet, download the weights elsewhere and pass "
            "model.weights_path=/path/to/model.safetensors."
        ) from err


def preprocessing(model: nn.Module | str) -> dict:
    """The input a timm model's ``pretrained_cfg`` asks for: mean, std, crop and resize size,
    channels.

    ``model``: a built timm model, or a model name (its default pretrained tag's config,
    read without building the model or downloading anything).
    """
    if isinstance(model, str):
        found = _timm().models.get_pretrained_cfg(model)
        cfg = found.to_dict() if found is not None else {}
    else:
        cfg = getattr(model, "pretrained_cfg", None) or {}
    channels, _, size = (int(v) for v in cfg.get("input_size", (3, 224, 224)))
    crop_pct = float(cfg.get("crop_pct", 0.875))
    return {
        "mean": [float(v) for v in cfg.get("mean", (0.485, 0.456, 0.406))],
        "std": [float(v) for v in cfg.get("std", (0.229, 0.224, 0.225))],
        "image_size": size,
        "decode_size": int(math.floor(size / crop_pct)),  # timm's eval resize: size / crop_pct
        "num_channels": channels,
    }
