"""The input pretrained weights were trained with, and the one check of the data against it.

Where a model config starts from weights, their preprocessing is on record:

- ``source=torchvision`` with ``weights`` (an enum member): the member's ``transforms()``;
- ``source=timm`` with ``pretrained`` or ``weights_path``: timm's ``pretrained_cfg`` of the
  model name (mean, std, ``input_size``, ``crop_pct``; read without downloading);
- ``weights_path`` of a lightning_cls run (a ``.ckpt``, or ``model_weights.pt`` with its
  ``model_weights.json`` beside it): the ``InputSpec`` keys it carries.

A bare state dict records nothing, and nothing is checked. ``train`` fills the data options
the config leaves null from the record (``pretrained_preprocessing``), then
``check_pretrained_preprocessing`` refuses data that still disagrees (an explicit ``data.mean``,
another ``data.image_size``) in one line naming both, unless ``allow_preprocessing_mismatch=true``.
"""

from __future__ import annotations

import functools
import json
import math
import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

OVERRIDE = "allow_preprocessing_mismatch"
# What is compared, and the data option that sets it.
CHECKED = {"mean": "data.mean", "std": "data.std", "image_size": "data.image_size",
           "num_channels": "data.num_channels"}  # fmt: skip
_TOLERANCE = 1e-4  # mean/std written with 3-4 digits (0.485) equal the weights' own


def pretrained_preprocessing(model_kwargs: Mapping[str, Any]) -> dict | None:
    """The preprocessing on record for the weights a model config starts from: ``mean``,
    ``std``, ``image_size`` (the crop), ``decode_size`` (the resize; None: none),
    ``num_channels`` and ``source`` (what recorded it, for messages); None when nothing does
    (random weights, a bare state dict)."""
    source, name = model_kwargs.get("source"), model_kwargs.get("name")
    path = model_kwargs.get("weights_path")
    if source == "torchvision" and model_kwargs.get("weights"):
        from lightning_cls.models.torchvision_models import preprocessing

        found = preprocessing(name, model_kwargs["weights"])
        return {**found, "source": f"torchvision's {name} {model_kwargs['weights']}"}
    if path and (found := saved_spec(path)) is not None:
        return found
    if source == "timm" and (model_kwargs.get("pretrained") or path):
        from lightning_cls.models.timm_models import preprocessing

        return {**preprocessing(name), "source": f"timm's {name} (its pretrained_cfg)"}
    return None


def saved_spec(path: str | os.PathLike) -> dict | None:
    """The preprocessing a lightning_cls file carries (a checkpoint's ``hyper_parameters``,
    or the ``<stem>.json`` beside exported weights); None for any other file."""
    path = Path(path).expanduser()
    if not path.is_file():
        return None  # the model builder names the missing file
    beside = path.with_suffix(".json")
    stat = path.stat()
    return _saved_spec(str(path), str(beside), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)  # train fills the data from it, then checks the data against it
def _saved_spec(path: str, beside: str, size: int, mtime_ns: int) -> dict | None:
    hparams = None
    if Path(beside).is_file():
        try:
            hparams = json.loads(Path(beside).read_text())
        except (OSError, ValueError):
            hparams = None
    if hparams is None and Path(path).suffix == ".safetensors":
        return None  # tensors only: no hyper-parameters to read
    if hparams is None:
        import torch

        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
        except (RuntimeError, OSError, ValueError, EOFError, pickle.UnpicklingError):
            return None  # not a checkpoint this check can read; the builder says more
        hparams = saved.get("hyper_parameters") if isinstance(saved, Mapping) else None
    keys = ("mean", "std", "image_size", "num_channels")
    if not isinstance(hparams, Mapping) or any(hparams.get(k) is None for k in keys):
        return None
    return {
        "mean": [float(v) for v in hparams["mean"]],
        "std": [float(v) for v in hparams["std"]],
        "image_size": int(hparams["image_size"]),
        "num_channels": int(hparams["num_channels"]),
        "decode_size": hparams.get("resize_size"),
        "source": f"{Path(path).name} (the input spec it carries)",
    }


def check_pretrained_preprocessing(
    model_kwargs: Mapping[str, Any], data: Any, allow: bool = False
) -> None:
    """Refuse ``data`` (an ``InputSpec`` or a mapping of its keys: what the DataModule feeds)
    when it disagrees with the preprocessing the weights of ``model_kwargs`` were trained
    with, in one ``ValueError`` line naming both and the fix; ``allow``: proceed."""
    if allow is not True and allow is not False:  # Hydra reads ...=no as the string "no"
        raise TypeError(
            f"{OVERRIDE}={allow!r} is not a boolean; set {OVERRIDE}=true to train on data "
            f"preprocessed unlike the weights, or {OVERRIDE}=false."
        )
    recorded = pretrained_preprocessing(model_kwargs)
    if recorded is None or allow:
        return
    data = data.to_dict() if hasattr(data, "to_dict") else dict(data)
    differ = [
        key for key in CHECKED if data.get(key) is not None and not _same(recorded[key], data[key])
    ]
    if not differ:
        return
    shown = ", ".join(f"{CHECKED[k]}={_show(data[k])}" for k in differ)
    fix = " ".join(f"{CHECKED[k]}={_value(recorded[k])}" for k in differ)
    raise ValueError(
        f"The weights ({recorded['source']}) were trained with mean={_show(recorded['mean'])}, "
        f"std={_show(recorded['std'])}, {recorded['image_size']} px, "
        f"{recorded['num_channels']} channels; {shown} {'differs' if len(differ) == 1 else 'differ'}: "
        f"set {fix} or pass {OVERRIDE}=true to proceed."
    )


def _same(recorded: Any, data: Any) -> bool:
    if isinstance(recorded, (list, tuple)):
        return len(recorded) == len(data) and all(
            math.isclose(a, b, abs_tol=_TOLERANCE) for a, b in zip(recorded, data)
        )
    return int(recorded) == int(data)


def _show(value: Any) -> str:
    """(0.485, 0.456, 0.406) for a sequence, the number otherwise."""
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(f"{v:g}" for v in value) + ")"
    return str(value)


def _value(value: Any) -> str:
    """As a Hydra override takes it: [0.485,0.456,0.406]."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(f"{v:g}" for v in value) + "]"
    return str(value)
