"""Export trained classifiers (ONNX, TorchScript, torch.export), quantize them to INT8, and
run any artifact with its stored preprocessing. ``python -m lightning_cls.export`` is the
Hydra entry point; this package itself never imports Hydra, and imports onnx/onnxruntime
(the ``export`` extra) only where they are used."""

from lightning_cls.export.artifacts import Predictor, load_artifact, load_torch_model, predict_files
from lightning_cls.export.callback import ExportCallback
from lightning_cls.export.exporter import (
    AccuracyDropError,
    ExportConfig,
    ExportResult,
    QuantizeConfig,
    export_model,
)
from lightning_cls.export.meta import ExportCheckError, ModelMeta
from lightning_cls.inference.spec import InputSpec

__all__ = [
    "AccuracyDropError",
    "ExportCallback",
    "ExportCheckError",
    "ExportConfig",
    "ExportResult",
    "InputSpec",
    "ModelMeta",
    "Predictor",
    "QuantizeConfig",
    "export_model",
    "load_artifact",
    "load_torch_model",
    "predict_files",
]
