"""LiteRT export (``export=litert``): a ``.tflite`` model converted by ``litert-torch``.

litert-torch 0.10 pulls ``typing-extensions<4.13`` (through xdsl), older than this project's
environment, so it lives in an environment of its own layered on the project's (``make
venv-litert``, docs/guides/exporting.md). Where ``litert_torch`` imports here (a command run
from that environment) the network is converted in this process; elsewhere it is saved as a
``torch.export`` program and converted by that environment's Python in a subprocess
(``LITERT_PYTHON``, default ``.venv-litert/bin/python``). Either way the spec is then added
to the flatbuffer's ``metadata`` table (``inference.litert``), and the skeleton
(``export.writer``) reads the file back with ai-edge-litert's ``Interpreter`` and checks it.

The model is converted at batch 1 (litert-torch 0.10 cannot lower a dynamic batch through
``flatten``); the runtime runs a batch one image at a time. fp32 only: litert-torch's INT8 path
(``quant_config``) is PT2E quantization calibrated by running the captured graph, a second
pipeline the accuracy gate would have to drive inside the other environment.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from lightning_cls.export.writer import Writer
from lightning_cls.inference.litert import METADATA_NAME

DEFAULT_PYTHON = ".venv-litert/bin/python"
NO_CONVERTER = (
    "LiteRT converts with litert-torch, which lives in an environment of its own: run "
    f"`make venv-litert` (or set LITERT_PYTHON to its python; {DEFAULT_PYTHON} does not exist)."
)


def converter_python() -> str | None:
    """The Python that converts: this one where ``litert_torch`` imports, else ``LITERT_PYTHON``
    or ``.venv-litert/bin/python`` (None: neither exists)."""
    if importlib.util.find_spec("litert_torch"):
        return sys.executable
    candidate = os.environ.get("LITERT_PYTHON", DEFAULT_PYTHON)
    return candidate if Path(candidate).is_file() else None


def convert_program(program_path: str, out_path: str, shape: str) -> None:
    """Convert the ``torch.export`` program at ``program_path`` to ``.tflite`` at ``out_path``,
    sampled at ``shape`` ("1,3,32,32"); run where ``litert_torch`` imports."""
    import litert_torch

    module = torch.export.load(program_path).module()
    example = torch.zeros(*(int(s) for s in shape.split(",")))
    litert_torch.convert(module, (example,)).export(out_path)


def add_metadata(path: Path, name: str, text: str) -> None:
    """Store ``text`` under ``name`` in the ``.tflite`` flatbuffer's ``metadata`` table."""
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(path.read_bytes()))
    model.buffers.append(schema.BufferT(data=list(text.encode())))
    entry = schema.MetadataT(name=name, buffer=len(model.buffers) - 1)
    model.metadata = [*(model.metadata or []), entry]
    path.write_bytes(bytes(flatbuffer_utils.convert_object_to_bytearray(model)))


class LiteRTWriter(Writer):
    """``model.tflite``: fp32, batch 1 (a batch runs image by image), spec in its metadata."""

    key, file, title = "litert", "model.tflite", "LiteRT"
    modules = ("ai_edge_litert",)
    extra = "litert"

    @classmethod
    def available(cls) -> bool:
        return super().available() and converter_python() is not None

    @classmethod
    def unavailable(cls) -> str:
        return super().unavailable() or ("" if converter_python() else NO_CONVERTER)

    def write(self, net, example, tmp, spec):
        python = converter_python()
        if python is None:
            raise FileNotFoundError(NO_CONVERTER)
        shape = ",".join(str(s) for s in (1, *example.shape[1:]))
        with tempfile.TemporaryDirectory(dir=tmp.parent) as folder:
            program = f"{folder}/net.pt2"  # what crosses to the other environment
            torch.export.save(torch.export.export(net, (example[:1],)), program)
            if python == sys.executable:
                convert_program(program, str(tmp), shape)
            else:
                _convert_in(python, program, tmp, shape)
        add_metadata(tmp, METADATA_NAME, spec.to_json())


def _convert_in(python: str, program: str, tmp: Path, shape: str) -> None:
    """``convert_program`` run by ``python`` (the converter's environment)."""
    code = "import sys; from lightning_cls.export.litert import convert_program; "
    code += "convert_program(*sys.argv[1:])"
    done = subprocess.run(
        [python, "-c", code, program, str(tmp), shape], capture_output=True, text=True
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"litert-torch ({python}) could not convert the network: {last}")
