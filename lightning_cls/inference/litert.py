"""LiteRT runtime for ``.tflite`` models written by ``export=litert``.

The ``InputSpec`` travels in the flatbuffer's own ``metadata`` table (TFLite's place for
named byte strings, next to the graph) under ``lightning_cls.meta.json``, one JSON object.
``ai-edge-litert``'s ``Interpreter`` runs the file on its XNNPACK CPU delegate without torch;
the model is converted at batch 1 (its reshapes are fixed to it, so the interpreter cannot be
resized: XNNPACK refuses), and a batch runs one image at a time. An INT8 file
(``export=litert_int8``) takes and answers int8 tensors: the float batch is quantized with the
input's stored (scale, zero point) and each output dequantized with its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lightning_cls.inference.arrays import as_kind, as_numpy, call_numpy
from lightning_cls.inference.artifact_checks import unreadable_as
from lightning_cls.inference.runtimes import Runtime
from lightning_cls.inference.spec import merge_spec

METADATA_NAME = "lightning_cls.meta.json"


def read_metadata(data: bytes) -> dict | None:
    """The spec stored in a ``.tflite`` flatbuffer's ``metadata`` table (None: none there)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(data, 0)
    for i in range(model.MetadataLength()):
        entry = model.Metadata(i)
        if entry.Name().decode() == METADATA_NAME:
            raw = model.Buffers(entry.Buffer()).DataAsNumpy()
            return json.loads(bytes(raw).decode())
    return None


class LiteRTRuntime(Runtime):
    """A ``.tflite`` model on ai-edge-litert's ``Interpreter`` (CPU, XNNPACK), numpy in/out."""

    kind = "litert"
    arrays = "numpy"  # predict and serve of a .tflite never import torch

    def __init__(
        self, path, *, spec=None, threads=None, device="cpu", model_name=None, model_kwargs=None
    ):
        try:
            from ai_edge_litert.interpreter import Interpreter
        except ImportError as err:
            raise ImportError(
                f"{Path(path).name} is a LiteRT model; install its runtime with "
                "pip install 'lightning_cls[litert]'."
            ) from err
        path = Path(path)
        self.device = "cpu"
        with unreadable_as(path, "a LiteRT .tflite model"):
            stored = read_metadata(path.read_bytes())
            self.interpreter = Interpreter(model_path=str(path), num_threads=threads)
        self.spec = merge_spec(stored, spec, f"{path.name} ({METADATA_NAME} inside)")
        self.input = self.interpreter.get_input_details()[0]
        self.output_details = self.interpreter.get_output_details()
        self.gives_features = len(self.output_details) > 1
        self.interpreter.allocate_tensors()

    def __call__(self, x):
        return call_numpy(lambda a: self._run(a)[0], x)

    def outputs(self, x):
        logits, *rest = self._run(np.ascontiguousarray(as_numpy(x), dtype=np.float32))
        return as_kind(logits, x), (as_kind(rest[0], x) if rest else None)

    def _run(self, x: np.ndarray) -> list[np.ndarray]:
        rows = []
        for image in np.split(x, len(x)) if len(x) else []:  # (1, C, H, W): its fixed batch
            self.interpreter.set_tensor(self.input["index"], quantized(image, self.input))
            self.interpreter.invoke()
            get = self.interpreter.get_tensor
            rows.append([dequantized(get(o["index"]), o) for o in self.output_details])
        return [np.concatenate(parts) for parts in zip(*rows)]


def quantized(x: np.ndarray, detail: dict) -> np.ndarray:
    """``x`` (float32) as the tensor ``detail`` describes takes it: itself for a float tensor,
    else ``round(x / scale) + zero_point`` in its integer type (an INT8 file's input)."""
    dtype = detail["dtype"]
    if np.issubdtype(dtype, np.floating):
        return x
    scale, zero = detail["quantization"]
    info = np.iinfo(dtype)
    return np.clip(np.round(x / scale) + zero, info.min, info.max).astype(dtype)


def dequantized(a: np.ndarray, detail: dict) -> np.ndarray:
    """The float32 values of tensor ``a`` that ``detail`` describes (an INT8 file's output)."""
    if np.issubdtype(a.dtype, np.floating):
        return a.copy()
    scale, zero = detail["quantization"]
    return (a.astype(np.float32) - zero) * np.float32(scale)
