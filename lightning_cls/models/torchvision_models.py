"""torchvision's own classifiers by name, random or pretrained, with the head fitted to the data.

``model=torchvision model.name=resnet18`` always means torchvision's ResNet-18 (ImageNet stem),
never the registry's CIFAR-stem ``resnet18``: the config carries ``source: torchvision`` and
``create_model`` hands such names straight to ``build_torchvision_model``.

Weights come from torchvision's weights enum (``weights="DEFAULT"`` or ``"IMAGENET1K_V1"``,
downloaded once into the torch hub dir) or from a local file (``weights_path``: a state dict,
or a Lightning checkpoint of a ``ClassificationModule``), which works offline. When the data
has another number of classes than the weights, the classifier head (the module holding the
network's last parameters) is re-initialized and a log line names it.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Mapping
from pathlib import Path

import torch
import torchvision
from torch import nn

log = logging.getLogger(__name__)

# Prefixes a state dict saved from a wrapper carries (ClassificationModule.net, torch.compile).
_WRAPPER_PREFIXES = ("net.", "_orig_mod.", "module.")


def build_torchvision_model(
    name: str,
    num_classes: int = 1000,
    in_channels: int = 3,
    image_size: int | None = None,  # torchvision models are size-agnostic (adaptive pooling)
    weights: str | None = None,
    weights_path: str | None = None,
    **kwargs,
) -> nn.Module:
    """torchvision's ``name`` with ``num_classes`` outputs, optionally starting from weights.

    ``weights`` names a member of the model's weights enum (``DEFAULT``, ``IMAGENET1K_V1``, ...);
    ``weights_path`` a local state dict. Give at most one.
    """
    if in_channels != 3:
        raise ValueError(
            f"torchvision model '{name}' expects 3 input channels, got in_channels={in_channels}; "
            "use RGB data (data.num_channels=3)."
        )
    if weights is not None and weights_path is not None:
        raise ValueError(
            f"Give model.weights={weights!r} or model.weights_path={weights_path!r}, not both."
        )
    model = torchvision.models.get_model(name, weights=None, num_classes=num_classes, **kwargs)
    if weights is not None:
        load_pretrained(model, _download_state_dict(name, weights), f"{name} weights {weights}")
    elif weights_path is not None:
        load_pretrained(model, read_state_dict(weights_path), str(weights_path))
    return model


def weights_enum(name: str, weights: str):
    """The torchvision weights member ``weights`` of model ``name`` (e.g. ResNet18_Weights.DEFAULT)."""
    try:
        members = torchvision.models.get_model_weights(name)
    except (KeyError, ValueError) as err:
        raise ValueError(f"torchvision has no pretrained weights for '{name}' ({err}).") from err
    if weights not in members.__members__:
        raise ValueError(
            f"Unknown weights '{weights}' for torchvision model '{name}'; use one of "
            f"{', '.join(members.__members__)}."
        )
    return members[weights]


def preprocessing(name: str, weights: str) -> dict:
    """The input the weights were trained with: mean, std, crop (``image_size``), resize size."""
    transforms = weights_enum(name, weights).transforms()
    return {
        "mean": [float(v) for v in transforms.mean],
        "std": [float(v) for v in transforms.std],
        "image_size": int(transforms.crop_size[0]),
        "decode_size": int(transforms.resize_size[0]),
        "num_channels": 3,  # torchvision's classifiers take RGB
    }


def _download_state_dict(name: str, weights: str) -> dict:
    member = weights_enum(name, weights)
    try:
        return member.get_state_dict(progress=False, check_hash=True)
    except (OSError, RuntimeError) as err:  # URLError is an OSError; a bad hash a RuntimeError
        hub = Path(torch.hub.get_dir()) / "checkpoints"
        raise ConnectionError(
            f"Downloading the {member} weights for '{name}' failed ({type(err).__name__}: {err}). "
            f"Without internet, fetch {member.url} elsewhere and pass "
            f"model.weights_path=/path/to/{os.path.basename(member.url)} (or copy it into {hub})."
        ) from err


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """A state dict from ``path``: a plain one, or the ``state_dict`` of a Lightning checkpoint.

    A wrapper's prefix (``net.`` of ``ClassificationModule``, ``_orig_mod.``, ``module.``) is
    removed when every key carries it.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"model.weights_path={path} does not exist; give a .pth state dict."
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, OSError, ValueError, EOFError, pickle.UnpicklingError) as err:
        raise ValueError(f"Cannot read weights from {path}: {type(err).__name__}: {err}") from err
    if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
        state = state["state_dict"]
    if not isinstance(state, Mapping) or not all(torch.is_tensor(v) for v in state.values()):
        raise ValueError(
            f"{path} is not a state dict (a mapping of names to tensors); save one with "
            "torch.save(model.state_dict(), path)."
        )
    for prefix in _WRAPPER_PREFIXES:
        if state and all(k.startswith(prefix) for k in state):
            state = {k[len(prefix) :]: v for k, v in state.items()}
    return dict(state)


def head_name(model: nn.Module) -> str:
    """Name of the module that holds the network's last parameter: its classifier head."""
    last = list(model.named_parameters())[-1][0]
    return last.rsplit(".", 1)[0]


def load_pretrained(model: nn.Module, state: Mapping[str, torch.Tensor], source: str) -> list[str]:
    """Load ``state`` into ``model``; re-initialize the head if its shape differs.

    Returns the keys left at their fresh initialization. Any other mismatch (missing or
    unexpected keys, other shapes) is a ValueError naming the first offending keys.
    """
    own = model.state_dict()
    head = head_name(model)
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    reshaped = [k for k in own if k in state and state[k].shape != own[k].shape]
    in_head = [k for k in reshaped if k.startswith(head + ".")]
    wrong = [k for k in reshaped if k not in in_head]
    if missing or unexpected or wrong:
        parts = []
        if missing:
            parts.append(f"missing {_first(missing)}")
        if unexpected:
            parts.append(f"unexpected {_first(unexpected)}")
        if wrong:
            parts.append(
                "shape mismatch "
                + ", ".join(
                    f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in wrong[:3]
                )
            )
        raise ValueError(
            f"Weights in {source} do not fit {type(model).__name__}: {'; '.join(parts)}. Pass "
            "weights saved from the same architecture (model.name), e.g. "
            "torch.save(model.state_dict(), path)."
        )
    kept = {k: v for k, v in state.items() if k not in in_head}
    model.load_state_dict(kept, strict=False)
    if in_head:
        old = state[in_head[0]].shape[0]
        log.info(
            "Loaded %s; replaced the classifier head '%s' (%d -> %d outputs), freshly initialized.",
            source,
            head,
            old,
            own[in_head[0]].shape[0],
        )
    else:
        log.info("Loaded %s (all %d tensors).", source, len(kept))
    return in_head


def _first(keys: list[str], n: int = 3) -> str:
    more = f" (+{len(keys) - n} more)" if len(keys) > n else ""
    return ", ".join(keys[:n]) + more


LIBRARIES = ("torchvision", "timm")


def build_from_library(source: str, name: str, **kwargs) -> nn.Module:
    """``name`` from the library ``source`` (torchvision or timm), bypassing the registry."""
    if source == "torchvision":
        return build_torchvision_model(name, **kwargs)
    if source == "timm":
        from lightning_cls.models.timm_models import build_timm_model

        return build_timm_model(name, **kwargs)
    raise ValueError(f"Unknown model source '{source}'; use one of {', '.join(LIBRARIES)}.")
