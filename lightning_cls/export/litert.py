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
``flatten``); the runtime runs a batch one image at a time. ``export=litert_int8``
(``export.int8.LiteRTInt8``) goes through the same conversion with a calibration batch: the
captured graph is PT2E-quantized (``quantize_pt2e``: litert-torch's symmetric per-channel INT8
quantizer, calibrated on the train images every INT8 format calibrates on, crossing to the
other environment as a ``.npy`` file) and converted with its ``quant_config``; the file then
takes and answers int8 tensors, which the runtime (``inference.litert``) quantizes and
dequantizes with the scales stored in the file.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from lightning_cls.export.writer import Writer
from lightning_cls.inference.litert import METADATA_NAME

DEFAULT_PYTHON = ".venv-litert/bin/python"
# Where this lightning_cls is imported from: the checkout of a `make` (editable) install, whose
# .venv-litert sits beside it and which the converter's Python must import too (its .pth file
# adds .venv's site-packages, but not the editable install's own .pth hook inside them).
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
NO_CONVERTER = (
    "LiteRT converts with litert-torch, which lives in an environment of its own: run "
    f"`make venv-litert` (or set LITERT_PYTHON to its python; {DEFAULT_PYTHON} does not exist "
    f"here nor in {PACKAGE_ROOT})."
)


def converter_python() -> str | None:
    """The Python that converts: this one where ``litert_torch`` imports, else ``LITERT_PYTHON``
    or ``.venv-litert/bin/python`` in the working folder or beside the package's checkout
    (None: none exists)."""
    if importlib.util.find_spec("litert_torch"):
        return sys.executable
    if "LITERT_PYTHON" in os.environ:
        candidates = [os.environ["LITERT_PYTHON"]]
    else:
        candidates = [DEFAULT_PYTHON, str(PACKAGE_ROOT / DEFAULT_PYTHON)]
    return next((c for c in candidates if Path(c).is_file()), None)


def convert_program(program_path: str, out_path: str, shape: str, calibration: str = "") -> None:
    """Convert the ``torch.export`` program at ``program_path`` to ``.tflite`` at ``out_path``,
    sampled at ``shape`` ("1,3,32,32"), INT8 when ``calibration`` names a ``.npy`` of
    normalized images (N, C, H, W); run where ``litert_torch`` imports."""
    import litert_torch

    module = torch.export.load(program_path).module()
    example = torch.zeros(*(int(s) for s in shape.split(",")))
    options = {}
    if calibration:
        module, options["quant_config"] = quantize_pt2e(module, np.load(calibration))
    litert_torch.convert(module, (example,), **options).export(out_path)


def quantize_pt2e(module: torch.nn.Module, images: np.ndarray):
    """``module`` (a ``torch.export`` graph at batch 1) PT2E-quantized to static INT8 with
    litert-torch's quantizer (symmetric, per-channel weights), its observers calibrated on
    ``images`` one at a time; returns it and the ``quant_config`` its conversion takes."""
    from litert_torch.quantize import pt2e_quantizer
    from litert_torch.quantize.quant_config import QuantConfig
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    config = pt2e_quantizer.get_symmetric_quantization_config(is_per_channel=True)
    quantizer = pt2e_quantizer.PT2EQuantizer().set_global(config)
    prepared = prepare_pt2e(module, quantizer)
    with torch.no_grad():
        for image in torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32)).split(1):
            prepared(image)
    return convert_pt2e(prepared, fold_quantize=False), QuantConfig(pt2e_quantizer=quantizer)


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
        write_tflite(net, example, tmp, spec)


def write_tflite(net, example, tmp: Path, spec, calibration: np.ndarray | None = None) -> None:
    """``net`` converted at batch 1 to ``.tflite`` at ``tmp`` with ``spec`` in its metadata;
    INT8 (PT2E) calibrated on ``calibration`` (normalized images, N x C x H x W) when given."""
    python = converter_python()
    if python is None:
        raise FileNotFoundError(NO_CONVERTER)
    shape = ",".join(str(s) for s in (1, *example.shape[1:]))
    with tempfile.TemporaryDirectory(dir=tmp.parent) as folder:
        program = f"{folder}/net.pt2"  # what crosses to the other environment
        torch.export.save(torch.export.export(net, (example[:1],)), program)
        images = ""
        if calibration is not None:
            images = f"{folder}/calibration.npy"  # ... with the images it calibrates on
            np.save(images, calibration)
        if python == sys.executable:
            convert_program(program, str(tmp), shape, images)
        else:
            _convert_in(python, program, tmp, shape, images)
    add_metadata(tmp, METADATA_NAME, spec.to_json())


def _convert_in(python: str, program: str, tmp: Path, shape: str, calibration: str) -> None:
    """``convert_program`` run by ``python`` (the converter's environment), importing this
    lightning_cls from any working folder (``PACKAGE_ROOT`` appended: behind the environment's
    own packages, which must shadow the project's). A module that environment lacks is one
    line naming it and ``make venv-litert``; any other failure is the converter's own."""
    code = "import sys; sys.path.append(sys.argv.pop(1)); "
    code += "from lightning_cls.export.litert import convert_program; "
    code += "convert_program(*sys.argv[1:])"
    done = subprocess.run(
        [python, "-c", code, str(PACKAGE_ROOT), program, str(tmp), shape, calibration],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        if last.startswith("ModuleNotFoundError"):
            raise ImportError(
                f"LiteRT's converter environment ({python}) cannot import what it needs ({last}): "
                f"run `make venv-litert` again (or `{python} -m pip install litert-torch`)."
            )
        raise RuntimeError(f"litert-torch ({python}) could not convert the network: {last}")
