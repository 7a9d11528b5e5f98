"""Export trained classifiers (ONNX, TorchScript, torch.export, OpenVINO, Triton), quantize
them to INT8 and verify each file against the eager network.

``python -m lightning_cls.export`` is the Hydra entry point and ``ExportCallback``
(``lightning_cls.export.callback``) the Lightning hook; this package itself imports neither
Hydra nor Lightning, and imports onnx/onnxruntime/openvino (the ``export``/``openvino``
extras) only where they are used. Running an artifact is ``lightning_cls.inference``.
"""

from lightning_cls.export.errors import AccuracyDropError, ExportCheckError
from lightning_cls.export.exporter import ExportConfig, ExportResult, QuantizeConfig, export_model

__all__ = [
    "AccuracyDropError",
    "ExportCheckError",
    "ExportConfig",
    "ExportResult",
    "QuantizeConfig",
    "export_model",
]
