"""Load any model artifact into one ``Predictor``: batched inference with its preprocessing.

Supported: Lightning ``.ckpt``; ``model_weights.pt`` (a ``state_dict`` of the bare network)
with a registry ``model_name``; TorchScript (``.torchscript``); ONNX (``.onnx``, fp32 or
int8) and torch.export programs (``.pt2``). Each carries its ``ModelMeta`` (classes, mean/std,
input size), except bare weights, which take it from ``meta=`` or a ``meta.json`` beside them.
"""

from __future__ import annotations

import json
import logging
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lightning_cls.checkpointing import network_state_dict
from lightning_cls.export.meta import META_FILE, ModelMeta
from lightning_cls.images import load_image_batch
from lightning_cls.models import create_model

log = logging.getLogger(__name__)

KINDS = ("ckpt", "weights", "torchscript", "onnx", "pt2")
_SUFFIX_KIND = {".ckpt": "ckpt", ".onnx": "onnx", ".pt2": "pt2", ".torchscript": "torchscript"}


class Predictor:
    """Runs one artifact on normalized float batches; ``predict_images`` takes uint8 images."""

    def __init__(
        self,
        forward: Callable[[torch.Tensor], torch.Tensor],
        meta: ModelMeta,
        kind: str,
        path: Path,
        device: str = "cpu",
    ):
        self._forward, self.meta, self.kind, self.path = forward, meta, kind, path
        self.device = torch.device(device)

    def __repr__(self) -> str:
        return f"Predictor({self.kind}: {self.path}, {self.meta.num_classes} classes)"

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Normalized float (B, C, H, W) -> logits (B, classes), on the CPU."""
        expected = self.meta.input_shape
        if x.ndim != 4 or tuple(x.shape[1:]) != expected:
            raise ValueError(
                f"{self.kind} model expects input (B, {', '.join(map(str, expected))}), "
                f"got {tuple(x.shape)}."
            )
        with torch.inference_mode():
            return self._forward(x.float().contiguous().to(self.device)).cpu()

    def predict_proba(self, x: torch.Tensor, batch_size: int = 64) -> torch.Tensor:
        """Normalized float (N, C, H, W) -> softmax probabilities (N, classes), in batches."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        outs = [
            self.logits(x[i : i + batch_size]).float().softmax(1)
            for i in range(0, len(x), batch_size)
        ]
        return torch.cat(outs) if outs else torch.empty(0, self.meta.num_classes)

    def predict_images(self, images: torch.Tensor, batch_size: int = 64) -> torch.Tensor:
        """uint8 (N, C, H, W) -> probabilities (N, classes), preprocessed as in training."""
        outs = [
            self.predict_proba(self.meta.preprocess(images[i : i + batch_size]), batch_size)
            for i in range(0, len(images), batch_size)
        ]
        return torch.cat(outs) if outs else torch.empty(0, self.meta.num_classes)

    def accuracy(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 256) -> float:
        """Top-1 accuracy (0..1) on uint8 images (N, C, H, W) with int labels (N,)."""
        if len(images) == 0:
            raise ValueError("Cannot measure accuracy on an empty split.")
        preds = self.predict_images(images, batch_size).argmax(1)
        return (preds == labels).float().mean().item()


def torch_predictor(
    net: nn.Module,
    meta: ModelMeta,
    kind: str = "eager",
    path: Path | None = None,
    device: str = "cpu",
) -> Predictor:
    return Predictor(net.eval().to(device), meta, kind, path or Path(f"<{kind}>"), device)


def load_artifact(
    path: str | Path,
    model_name: str | None = None,
    meta: ModelMeta | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
    threads: int | None = None,
    device: str = "cpu",
) -> Predictor:
    """A ``Predictor`` for any supported artifact (see the module docstring).

    ``device`` applies to the PyTorch kinds; ONNX files run on ONNX Runtime's CPU provider
    with ``threads`` intra-op threads (default: ORT's choice).
    """
    path = Path(path)
    kind = artifact_kind(path)
    if kind in ("ckpt", "weights"):
        net, meta = load_torch_model(path, model_name, meta, model_kwargs)
        return torch_predictor(net, meta, kind, path, device)
    if kind == "torchscript":
        from lightning_cls.export.torchscript import load_torchscript, quiet_jit

        module, meta = load_torchscript(path)
        module = module.to(device)

        def forward(x: torch.Tensor) -> torch.Tensor:
            with quiet_jit():
                return module(x)

        return Predictor(forward, meta, kind, path, device)
    if kind == "pt2":
        from lightning_cls.export.pt2 import load_pt2

        module, meta = load_pt2(path)
        return Predictor(module.to(device), meta, kind, path, device)
    from lightning_cls.export.onnx import make_session, read_metadata, run_session

    session = make_session(path, threads)
    return Predictor(lambda x: run_session(session, x), read_metadata(path), kind, path)


def artifact_kind(path: Path) -> str:
    """Which of ``KINDS`` a file is, from its suffix (and, for ``.pt``/``.pth``, its content)."""
    if not path.is_file():
        raise FileNotFoundError(f"Model artifact not found: {path}; check the path.")
    if path.suffix in _SUFFIX_KIND:
        return _SUFFIX_KIND[path.suffix]
    if path.suffix in (".pt", ".pth"):
        # A TorchScript archive holds compiled code; a state_dict archive holds only data.
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                if any("/code/" in n for n in archive.namelist()):
                    return "torchscript"
        return "weights"
    raise ValueError(
        f"Cannot tell what kind of model {path.name} is from its suffix '{path.suffix}'; "
        "use .ckpt, .pt/.pth (weights), .torchscript, .onnx or .pt2."
    )


def load_torch_model(
    path: str | Path,
    model_name: str | None = None,
    meta: ModelMeta | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
) -> tuple[nn.Module, ModelMeta]:
    """The bare network (eval mode) and its metadata from a ``.ckpt`` or a ``model_weights.pt``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Checkpoint not found: {path}; check the path.")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated file, not a torch file, unsafe pickle, ...
        raise ValueError(
            f"Cannot read {path} ({type(err).__name__}: {err}); is it a checkpoint?"
        ) from err
    if not isinstance(obj, dict):
        raise ValueError(f"{path} holds a {type(obj).__name__}, not a state_dict or checkpoint.")
    hparams = dict(obj.get("hyper_parameters") or {})
    state = obj.get("state_dict", obj)
    if "meta" in obj:  # {"state_dict": ..., "meta": {...}} bundles
        hparams = {**obj["meta"], **hparams}
    meta = meta or _find_meta(path, hparams)
    model_name = model_name or hparams.get("model_name") or meta.model_name
    if not model_name:
        raise ValueError(
            f"{path} does not say which network it holds; pass model_name=<registry name> "
            "(e.g. simplecnn, resnet18)."
        )
    kwargs = dict(hparams.get("model_kwargs") or meta.model_kwargs)
    kwargs.update(
        {
            "num_classes": meta.num_classes,
            "in_channels": meta.num_channels,
            "image_size": meta.image_size,
        }
    )
    kwargs.update(model_kwargs or {})
    net = create_model(model_name, **kwargs)
    try:
        net.load_state_dict(network_state_dict(state), strict=True)
    except RuntimeError as err:
        raise ValueError(
            f"The weights in {path} do not fit {model_name} built with {kwargs}: {err}\n"
            "Pass the model options the weights were trained with (model_kwargs=...)."
        ) from err
    meta = ModelMeta.from_dict({**meta.to_dict(), "model_name": model_name, "model_kwargs": kwargs})
    return net.eval(), meta


def _find_meta(path: Path, hparams: Mapping[str, Any]) -> ModelMeta:
    """Bare weights: a JSON beside them, else the run's checkpoint in the same folder
    (``SaveModelWeights`` writes ``model_weights.pt`` next to the best checkpoint)."""
    if "classes" in hparams:
        return ModelMeta.from_hparams(hparams)
    for candidate in (path.with_suffix(".json"), path.parent / META_FILE):
        if candidate.is_file():
            log.info("Preprocessing metadata for %s read from %s", path.name, candidate)
            return ModelMeta.from_dict(json.loads(candidate.read_text()))
    for ckpt in sorted(path.parent.glob("*.ckpt")):
        ckpt_hparams = (
            torch.load(ckpt, map_location="cpu", weights_only=True).get("hyper_parameters") or {}
        )
        if "classes" in ckpt_hparams:
            log.info("Preprocessing metadata for %s read from %s", path.name, ckpt)
            return ModelMeta.from_hparams(ckpt_hparams)
    raise ValueError(
        f"{path} holds weights only, without classes/mean/std/image size. Put them in "
        f"{path.with_suffix('.json').name} or {META_FILE} beside it (the export folder has one), "
        "keep the run's .ckpt beside it, or pass meta=ModelMeta(...)."
    )


def predict_files(
    predictor: Predictor, files: Sequence[str | Path], batch_size: int = 64, top_k: int = 5
) -> tuple[list[dict], list[tuple[Path, str]]]:
    """Classify image files in batches.

    Returns ``rows`` ({"file", "labels", "probs"} per readable image, top-k first) and
    ``failures`` ([(path, reason)] for every file that could not be read as an image), the
    shapes ``lightning_cls.images.write_predictions_csv`` takes.
    """
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}.")
    meta = predictor.meta
    k = min(top_k, meta.num_classes)
    rows: list[dict] = []
    failures: list[tuple[Path, str]] = []
    paths = [Path(f) for f in files]
    for start in range(0, len(paths), batch_size):
        chunk = paths[start : start + batch_size]
        x, ok, bad = load_image_batch(
            chunk, meta.image_size, meta.num_channels, meta.mean, meta.std
        )
        failures += bad
        if not ok:
            continue
        top = predictor.predict_proba(x, batch_size).topk(k, dim=1)  # (B, k)
        for path, probs, idx in zip(ok, top.values.tolist(), top.indices.tolist()):
            rows.append(
                {"file": str(path), "labels": [meta.classes[i] for i in idx], "probs": probs}
            )
    return rows, failures
