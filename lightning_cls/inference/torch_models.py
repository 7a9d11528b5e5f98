"""Rebuild the bare network from a Lightning ``.ckpt`` or a ``model_weights.pt`` state_dict.

No Lightning needed: a checkpoint is read as plain tensors and containers
(``weights_only=True``), the network is rebuilt from the registry (``model_name`` +
``model_kwargs``) and its weights loaded strictly. A TorchScript archive (compiled code, which
``torch.load`` would hand to ``torch.jit.load``) is never loaded here: it is refused with an
``UntrustedArtifactError`` naming ``load_artifact(path, trust_artifact=True)``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lightning_cls.inference.artifact_checks import UntrustedArtifactError, holds_torchscript
from lightning_cls.inference.network import build_network, network_state_dict
from lightning_cls.inference.spec import (
    META_FILE,
    REQUIRED_KEYS,
    InputSpec,
    SpecError,
    merge_spec,
)

log = logging.getLogger(__name__)


def load_torch_model(
    path: str | Path,
    model_name: str | None = None,
    spec: InputSpec | Mapping[str, Any] | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
) -> tuple[nn.Module, InputSpec]:
    """The bare network (eval mode) and its spec from a ``.ckpt`` or a ``model_weights.pt``.

    ``spec`` (an ``InputSpec`` or a partial mapping) fills or replaces what the file holds.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Checkpoint not found: {path}; check the path.")
    if holds_torchscript(path):
        raise UntrustedArtifactError(
            f"Refusing to read {path} as weights: it is a TorchScript archive, compiled code that "
            "runs when it is loaded. If you trust its source, load it with "
            "load_artifact(path, trust_artifact=True) (command line: trust_artifact=true)."
        )
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated file, not a torch file, unsafe pickle, ...
        raise ValueError(
            f"Cannot read {path} ({type(err).__name__}: {err}); is it a checkpoint?"
        ) from err
    if not isinstance(obj, dict):
        raise ValueError(f"{path} holds a {type(obj).__name__}, not a state_dict or checkpoint.")
    is_ckpt = path.suffix == ".ckpt" or "state_dict" in obj or "hyper_parameters" in obj
    if is_ckpt and not isinstance(obj.get("state_dict"), dict):
        raise ValueError(
            f"Checkpoint {path} has no 'state_dict' (keys: {', '.join(sorted(map(str, obj)))}); "
            "it was not written by Lightning's Trainer.save_checkpoint."
        )
    hparams = dict(obj.get("hyper_parameters") or {})
    state = obj["state_dict"] if is_ckpt else obj
    if isinstance(obj.get("meta"), dict):  # {"state_dict": ..., "meta": {...}} bundles
        hparams = {**obj["meta"], **hparams}
    overrides = spec.to_dict() if isinstance(spec, InputSpec) else dict(spec or {})
    spec = _resolve_spec(path, hparams, overrides, is_ckpt)
    model_name = model_name or hparams.get("model_name") or spec.model_name
    if not model_name:
        raise ValueError(
            f"{path} does not say which network it holds (no 'model_name' in its "
            "hyper_parameters); pass model_name=<registry name> (e.g. simplecnn, resnet18)."
        )
    kwargs = dict(hparams.get("model_kwargs") or spec.model_kwargs)
    kwargs.update(
        num_classes=spec.num_classes, in_channels=spec.num_channels, image_size=spec.image_size
    )
    kwargs.update(model_kwargs or {})
    net = build_network(model_name, kwargs, spec.classes)
    try:
        net.load_state_dict(network_state_dict(state), strict=True)
    except RuntimeError as err:
        for key in ("classes", "image_size", "num_channels"):  # an override changed the network
            trained = hparams.get(key)
            if overrides.get(key) is not None and trained is not None:
                if overrides[key] != trained and not isinstance(trained, str):
                    size = len(trained) if key == "classes" else trained
                    raise SpecError(
                        key,
                        f"The weights in {path} were trained with {key}={trained!r} and do not "
                        f"fit a network built for the override {key}={overrides[key]!r}; drop "
                        f"+spec.{key} or give one that matches "
                        + (
                            f"(+spec.classes=[...] with {size} names)."
                            if key == "classes"
                            else f"(+spec.{key}={size})."
                        ),
                    ) from err
        details = "; ".join(line.strip() for line in str(err).splitlines() if line.strip())
        raise ValueError(
            f"The weights in {path} do not fit {model_name} built with {kwargs}: {details}. "
            "Pass the model options the weights were trained with (model.* of its training run)."
        ) from err
    spec = InputSpec.from_dict({**spec.to_dict(), "model_name": model_name, "model_kwargs": kwargs})
    return net.eval(), spec


def _resolve_spec(
    path: Path, hparams: Mapping[str, Any], overrides: Mapping[str, Any], is_ckpt: bool
) -> InputSpec:
    """The checkpoint's own hparams; for bare weights a JSON beside them, else the run's
    checkpoint in the same folder (``SaveModelWeights`` writes ``model_weights.pt`` next to
    the best checkpoint). ``overrides`` go on top of whichever is found."""
    if is_ckpt or any(hparams.get(k) is not None for k in REQUIRED_KEYS):
        source = (
            f"Checkpoint {path}: its hyper_parameters"
            if is_ckpt
            else f"{path}: its bundled metadata"
        )
        return merge_spec(hparams, overrides, source)
    for candidate in (path.with_suffix(".json"), path.parent / META_FILE):
        if candidate.is_file():
            log.info("Preprocessing metadata for %s read from %s", path.name, candidate)
            return merge_spec(json.loads(candidate.read_text()), overrides, str(candidate))
    for ckpt in sorted(path.parent.glob("*.ckpt")):
        ckpt_hparams = (
            torch.load(ckpt, map_location="cpu", weights_only=True).get("hyper_parameters") or {}
        )
        if "classes" in ckpt_hparams:
            log.info("Preprocessing metadata for %s read from %s", path.name, ckpt)
            return merge_spec(ckpt_hparams, overrides, str(ckpt))
    if all(overrides.get(k) is not None for k in REQUIRED_KEYS):
        return merge_spec({}, overrides, str(path))
    raise ValueError(
        f"{path} holds weights only, without classes/mean/std/image size. Put them in "
        f"{path.with_suffix('.json').name} or {META_FILE} beside it (the export folder has one), "
        "keep the run's .ckpt beside it, or pass spec=InputSpec(...) (command line: "
        "+spec.classes=[...] +spec.mean=[...] +spec.std=[...] +spec.image_size=N "
        "+spec.num_channels=C)."
    )
