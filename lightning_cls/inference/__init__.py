"""Inference without Lightning or Hydra: what a server or a script needs to run a classifier.

- ``InputSpec`` (``spec``): the one description of the input every artifact carries.
- ``load_artifact`` / ``Predictor`` (``predictor``): any artifact (.onnx, .xml, .ckpt,
  model_weights.pt, .torchscript, .pt2) behind one batched API, flip TTA included; .pt2 and
  TorchScript only with ``trust_artifact=True`` (they can run code when loaded).
- ``predict_files`` / ``write_predictions_csv`` (``file_predictions``): image files -> rows
  -> the predictions CSV.
- ``RUNTIMES`` / ``register_runtime`` (``runtimes``): suffix -> runtime class; a new format is
  one small class.
- ``decode_image`` (``images``): files or raw bytes -> uint8 (C, H, W), as in training.

Importing this package pulls in neither ``pytorch_lightning`` nor Hydra (a test checks it).
"""

from lightning_cls.inference.file_predictions import (
    predict_files,
    top_k_labels,
    write_predictions_csv,
)
from lightning_cls.inference.images import IMAGE_SUFFIXES, decode_image, find_images

# OpenVINO IR (export=openvino); the openvino package is imported only when a .xml is loaded.
from lightning_cls.inference.openvino import OpenVINORuntime
from lightning_cls.inference.predictor import Predictor, UntrustedArtifactError, load_artifact
from lightning_cls.inference.runtimes import (
    RUNTIMES,
    Runtime,
    artifact_kind,
    register_runtime,
    runtime_for,
)
from lightning_cls.inference.spec import META_FILE, InputSpec

# ``lightning_cls.inference.tta`` is the module (TTA, tta, selective_tta), not the function.
from lightning_cls.inference.tta import TTA, flip_tta

register_runtime(".xml", OpenVINORuntime)


def __getattr__(name: str):
    # PEP 562: ``load_torch_model`` builds networks (the model registry, torchvision), which
    # predicting with or serving an ONNX file never needs; imported on first use.
    if name == "load_torch_model":
        from lightning_cls.inference.torch_models import load_torch_model

        return load_torch_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "IMAGE_SUFFIXES",
    "META_FILE",
    "RUNTIMES",
    "TTA",
    "InputSpec",
    "Predictor",
    "Runtime",
    "UntrustedArtifactError",
    "artifact_kind",
    "decode_image",
    "find_images",
    "flip_tta",
    "load_artifact",
    "load_torch_model",
    "predict_files",
    "register_runtime",
    "runtime_for",
    "top_k_labels",
    "write_predictions_csv",
]
