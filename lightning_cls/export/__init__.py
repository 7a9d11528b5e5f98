"""Export trained classifiers (ONNX, TorchScript, torch.export, OpenVINO, Triton), quantize
them to INT8 and verify each file against the eager network.

``python -m lightning_cls.export`` is the Hydra entry point and ``ExportCallback``
(``lightning_cls.export.callback``) the Lightning hook; this package itself imports neither
Hydra nor Lightning, and imports onnx/onnxruntime/openvino (the ``export``/``openvino``
extras) only where they are used. Running an artifact is ``lightning_cls.inference``.

Each file format is a ``Writer`` registered in ``FORMATS`` (``export.writer``); a new format is
one module with a ``Writer`` and a ``register_format`` call, read back by the runtime that
``inference.runtimes.RUNTIMES`` has for its suffix.
"""

from lightning_cls.export.errors import AccuracyDropError, ExportCheckError
from lightning_cls.export.exporter import ExportConfig, ExportResult, QuantizeConfig, export_model
from lightning_cls.export.writer import FORMATS, Writer, register_format, write_verified

# The built-in formats, in the order export_model writes them (OpenVINO converts the ONNX
# file); each module registers its writers on import.
# isort: off
from lightning_cls.export import onnx, onnx_e2e, torchscript, pt2, openvino  # noqa: F401
# isort: on

__all__ = [
    "FORMATS",
    "AccuracyDropError",
    "ExportCheckError",
    "ExportConfig",
    "ExportResult",
    "QuantizeConfig",
    "Writer",
    "export_model",
    "register_format",
    "write_verified",
]
