"""Load any model artifact into one ``Predictor`` (re-exported from ``lightning_cls.inference``).

Supported: Lightning ``.ckpt``; ``model_weights.pt`` (a ``state_dict`` of the bare network)
with a registry ``model_name``; TorchScript (``.torchscript``); ONNX (``.onnx``, fp32 or
int8) and torch.export programs (``.pt2``); plus any suffix added to
``lightning_cls.inference.runtimes.RUNTIMES``. The predictor lives in ``inference/`` so a
server needs no Lightning; this module keeps the export package's names for it.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from lightning_cls.inference.predictor import Predictor, load_artifact, predict_files
from lightning_cls.inference.runtimes import RUNTIMES, runtime_for
from lightning_cls.inference.spec import InputSpec
from lightning_cls.inference.torch_models import load_torch_model

__all__ = [
    "KINDS",
    "Predictor",
    "artifact_kind",
    "load_artifact",
    "load_torch_model",
    "predict_files",
    "torch_predictor",
]

KINDS = ("ckpt", "weights", "torchscript", "onnx", "pt2")


def artifact_kind(path: Path) -> str:
    """The kind of artifact ``path`` is (``ckpt``, ``weights``, ``torchscript``, ``onnx``, ...)."""
    path = Path(path)
    runtime = runtime_for(path)
    if runtime is RUNTIMES[".ckpt"]:
        return "ckpt" if path.suffix == ".ckpt" else "weights"
    return runtime.kind


def torch_predictor(
    net: nn.Module,
    spec: InputSpec,
    kind: str = "eager",
    path: Path | None = None,
    device: str = "cpu",
) -> Predictor:
    """A ``Predictor`` running ``net`` in eager PyTorch (eval mode, on ``device``)."""
    return Predictor(net.eval().to(device), spec, kind, path, device)
