"""ONNX export with the dynamo exporter and preprocessing metadata (``export=onnx``).

The file is self-contained (no external-data side file), has a dynamic batch axis named
``batch``, a pinned opset, and carries ``InputSpec`` in its ``metadata_props``. It is checked
by the export skeleton (``export.writer``) in ONNX Runtime, the runtime that serves it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from lightning_cls.export.errors import ExportCheckError
from lightning_cls.export.writer import Writer
from lightning_cls.fileio import atomic_path
from lightning_cls.inference.network import FeatureNet
from lightning_cls.inference.runtimes import (
    FEATURES_OUTPUT,
    make_session,  # noqa: F401  (public: benchmarks)
)
from lightning_cls.inference.spec import InputSpec

OPSET = 18
INPUT_NAME = "input"
OUTPUT_NAME = "logits"
FILE = "model.onnx"


@dataclass
class OnnxOptions:
    """``export.onnx.*`` (conf/export/onnx.yaml), the ONNX files' options (``model.onnx`` and
    ``model_e2e.onnx``)."""

    opset: int = OPSET  # pinned, so files do not change with the torch version


class OnnxWriter(Writer):
    """``model.onnx``: float NCHW in, logits out, read back in ONNX Runtime."""

    key, file, title = "onnx", FILE, "ONNX"
    modules = ("onnx", "onnxruntime")
    Options = OnnxOptions

    def __init__(self, opset: int = OPSET):
        self.opset = opset

    @classmethod
    def candidates(cls, options):
        return {"ort_fp32": cls(options.opset)}

    def write(self, net, example, tmp, spec):
        write_onnx(net, example, tmp, spec, self.opset, INPUT_NAME, OUTPUT_NAME)

    def copy_tagged(self, src, dst, key, text):
        return copy_tagged(src, dst, key, text)


def copy_tagged(src: Path, dst: Path, key: str, text: str) -> Path:
    """``src`` copied to ``dst`` with ``text`` under ``key`` in its ``metadata_props``."""
    import onnx

    model = onnx.load(str(src))
    entry = model.metadata_props.add()
    entry.key, entry.value = key, text
    with atomic_path(dst) as tmp:
        onnx.save_model(model, str(tmp), save_as_external_data=False)
    return dst


def write_onnx(
    module: nn.Module,
    example: torch.Tensor,
    tmp: Path,
    spec: InputSpec,
    opset: int,
    input_name: str,
    output_name: str,
) -> None:
    """``module`` as one self-contained ONNX file at ``tmp`` (dynamo exporter, dynamic batch
    axis, ``spec`` in ``metadata_props``), checked by ``onnx.checker``. Shared by ``export=onnx``
    and ``export=onnx_e2e``."""
    import onnx

    batch = torch.export.Dim("batch", min=1)
    torch.onnx.export(
        module,
        (example,),
        str(tmp),
        dynamo=True,
        dynamic_shapes=({0: batch},),
        opset_version=opset,
        input_names=[input_name],
        # A FeatureNet (a feature-space rejection rule) answers (logits, features).
        output_names=[output_name, *([FEATURES_OUTPUT] if isinstance(module, FeatureNet) else [])],
        external_data=False,
        verbose=False,
    )
    model = onnx.load(str(tmp))
    write_metadata(model, spec)
    onnx.save_model(model, str(tmp), save_as_external_data=False)
    onnx.checker.check_model(str(tmp))
    side_files = list(tmp.parent.glob(tmp.name + ".*"))
    if side_files:
        for side_file in side_files:
            side_file.unlink()
        raise ExportCheckError(
            f"ONNX export wrote side files {[p.name for p in side_files]}; expected one "
            "self-contained file."
        )


def write_metadata(model, spec: InputSpec, **extra: str) -> None:
    """Replace the model's ``metadata_props`` with ``spec`` (+ ``extra`` string entries)."""
    del model.metadata_props[:]
    for key, value in {**spec.to_props(), **extra}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value


def read_metadata(path: str | Path) -> InputSpec:
    """The ``InputSpec`` stored in an ``.onnx`` file's ``metadata_props``."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    props = {p.key: p.value for p in model.metadata_props}
    return InputSpec.from_props(props, f"{Path(path).name} (metadata_props)")


def run_session(session, x: torch.Tensor) -> torch.Tensor:
    """Run an ORT session on a float batch (B, C, H, W) -> logits (B, classes)."""
    name = session.get_inputs()[0].name
    (logits,) = session.run(None, {name: x.detach().cpu().contiguous().numpy()})
    return torch.from_numpy(logits)
