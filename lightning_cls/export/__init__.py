"""Export trained classifiers (ONNX, TorchScript, torch.export, OpenVINO, Triton), quantize
them to INT8 and verify each file against the eager network.

``python -m lightning_cls.export`` is the Hydra entry point and ``ExportCallback``
(``lightning_cls.export.callback``) the Lightning hook; this package itself imports neither
Hydra nor Lightning, and imports onnx/onnxruntime/openvino (the ``export``/``openvino``
extras) only where they are used. Running an artifact is ``lightning_cls.inference``.

Every format (INT8 methods, the Triton and ``auto`` steps included) is a ``Writer`` registered
in ``FORMATS`` (``export.writer``); a new format is one module with a ``Writer`` class and one
registration (``register_format("name", MyWriter)``, or a lazy line in ``FORMATS``' table),
read back by the runtime that ``inference.runtimes.RUNTIMES`` has for its suffix.
A format with options of its own declares them as a dataclass (``Writer.Options``) and gets
them from its own entry of the export config (``export.<format>.*``, in
``conf/export/<format>.yaml``). ``export_format(name, net, spec, path, **options)`` writes one
format; ``export_model`` all that an ``ExportConfig`` asks for. The built-in formats are imported on first use.

The public names below are imported on first use (PEP 562): the exporter and the writers
import torch, which ``python -m lightning_cls.export --help`` never needs (tests/test_layers.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from lightning_cls.export.errors import AccuracyDropError, ExportCheckError

if TYPE_CHECKING:
    from lightning_cls.export.exporter import (
        ExportConfig,
        ExportResult,
        QuantizeConfig,
        export_model,
    )
    from lightning_cls.export.int8 import Int8Options
    from lightning_cls.export.writer import (
        FORMATS,
        ExportData,
        Writer,
        export_format,
        register_format,
        write_verified,
    )

# public name -> the module of this package that defines it
_LAZY = {
    "ExportConfig": "exporter",
    "ExportResult": "exporter",
    "QuantizeConfig": "exporter",  # deprecated: the old export.quantize mapping
    "Int8Options": "int8",
    "export_model": "exporter",
    "FORMATS": "writer",
    "ExportData": "writer",
    "export_format": "writer",
    "Writer": "writer",
    "register_format": "writer",
    "write_verified": "writer",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


__all__ = [
    "FORMATS",
    "AccuracyDropError",
    "ExportCheckError",
    "ExportConfig",
    "ExportData",
    "ExportResult",
    "Int8Options",
    "QuantizeConfig",
    "Writer",
    "export_format",
    "export_model",
    "register_format",
    "write_verified",
]
