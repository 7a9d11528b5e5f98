"""``export=triton``: a Triton Inference Server model repository around an exported ONNX file.

Layout (Triton's): ``<repo>/<model_name>/config.pbtxt``, ``<repo>/<model_name>/1/model.onnx``
and ``labels.txt`` (Triton's classification extension answers top-k class names from it).
``config.pbtxt`` is protobuf text of Triton's ``ModelConfig``: the ``onnxruntime_onnx``
platform, input/output names, types and dims read from the ONNX graph (the dynamic batch axis
left to ``max_batch_size``), dynamic batching with no preferred sizes and no queue delay (Triton
then runs whatever has queued as soon as an instance is free: batches grow under load and
a lone request does not wait), and CPU instances (``KIND_CPU``).

``source`` picks the file: ``onnx`` (``model.onnx``: float NCHW in, logits out; clients
normalize pixels with the spec stored in its ``metadata_props``) or ``onnx_e2e``
(``model_e2e.onnx``: uint8 NHWC pixels in, probabilities out; clients only decode and resize).
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from lightning_cls.export.writer import Writer
from lightning_cls.fileio import atomic_path
from lightning_cls.inference.spec import InputSpec, props_to_dict

log = logging.getLogger(__name__)

# ONNX TensorProto element types -> Triton DataType names (those a classifier can have).
_TRITON_TYPES = {
    1: "TYPE_FP32",
    10: "TYPE_FP16",
    11: "TYPE_FP64",
    16: "TYPE_BF16",
    2: "TYPE_UINT8",
    3: "TYPE_INT8",
    6: "TYPE_INT32",
    7: "TYPE_INT64",
}
LABELS_FILE = "labels.txt"
SOURCES = ("onnx", "onnx_e2e")  # export formats a repository can wrap


@dataclass
class TritonConfig:
    """Options of the generated ``config.pbtxt`` (``export.triton.*`` in the config)."""

    model_name: str = "classifier"
    source: str = "onnx"  # which exported file Triton serves: onnx or onnx_e2e
    max_batch_size: int = 64
    max_queue_delay_us: int = 0  # > 0 makes every request wait for a batch to fill
    instances: int = 1  # model instances, each on the CPU (KIND_CPU)

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(
                f"export.triton.source={self.source!r} is not an ONNX export; use one of "
                f"{', '.join(SOURCES)}."
            )
        for name in ("max_batch_size", "instances"):
            if getattr(self, name) < 1:
                raise ValueError(f"export.triton.{name}={getattr(self, name)} must be >= 1.")
        if self.max_queue_delay_us < 0:
            raise ValueError(
                f"export.triton.max_queue_delay_us={self.max_queue_delay_us} must be >= 0 "
                "(0: no wait)."
            )


class TritonStep(Writer):
    """``export=triton``: a post-step, not a file of its own: the repository around the
    ``source`` file this export wrote (``export.triton.source``)."""

    key, file, title = "triton", "triton", "Triton repository"
    modules = ("onnx",)

    Options = TritonConfig  # export.triton.* (conf/export/triton.yaml)

    def __init__(self, config: TritonConfig | None = None):
        self.config = config or TritonConfig()
        self.requires = (self.config.source,)
        self.uses = (
            f"A Triton repository serves the {self.config.source} file (export.triton.source)"
        )
        self.files = {}

    @classmethod
    def from_options(cls, options, config):
        return [cls(options)]

    def bind(self, files, data):
        self.files = files

    def export(self, net, spec, path, **check):
        return export_triton(self.files[self.config.source], path, spec, self.config).parent


def export_triton(
    onnx_path: str | Path, repo: str | Path, spec: InputSpec, config: TritonConfig | None = None
) -> Path:
    """Write ``repo/<model_name>/`` for ``onnx_path``; return the ``config.pbtxt`` path."""
    import onnx

    config = config or TritonConfig()
    model = onnx.load(str(onnx_path), load_external_data=False)
    folder = Path(repo) / config.model_name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    with atomic_path(folder / "1" / "model.onnx", keep_suffix=True) as tmp:
        shutil.copyfile(onnx_path, tmp)
    with atomic_path(folder / LABELS_FILE) as tmp:
        tmp.write_text("\n".join(spec.classes) + "\n")
    text = model_config_text(model, config)
    path = folder / "config.pbtxt"
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    log.info("Wrote Triton model repository %s", folder)
    return path


def model_config_text(model, config: TritonConfig) -> str:
    """``config.pbtxt`` (protobuf text format of Triton's ``ModelConfig``) for an ONNX model.

    An image input (three dims after the batch) is marked with its layout, read from the
    ``layout`` the file's ``metadata_props`` carry (``NHWC`` for ``onnx_e2e``), so clients
    such as Triton's ``image_client`` know how to lay out pixels.
    """
    layout = props_to_dict({p.key: p.value for p in model.metadata_props}).get("layout")
    image_format = f"format: FORMAT_{layout}" if layout in ("NCHW", "NHWC") else ""
    inputs = [
        _tensor(v, "input", image_format if _rank(v) == 4 else "") for v in _graph_inputs(model)
    ]
    outputs = [_tensor(v, "output", f'label_filename: "{LABELS_FILE}"') for v in model.graph.output]
    sep = ",\n"
    return (
        f'name: "{config.model_name}"\n'
        'platform: "onnxruntime_onnx"\n'
        f"max_batch_size: {config.max_batch_size}\n"
        f"input [\n{sep.join(inputs)}\n]\n"
        f"output [\n{sep.join(outputs)}\n]\n"
        "dynamic_batching {\n"
        f"  max_queue_delay_microseconds: {config.max_queue_delay_us}\n"
        "}\n"
        f"instance_group [\n  {{\n    count: {config.instances}\n    kind: KIND_CPU\n  }}\n]\n"
    )


def _graph_inputs(model) -> list:
    """Graph inputs that are not initializers (older exporters list weights as inputs)."""
    weights = {init.name for init in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in weights]


def _rank(value) -> int:
    return len(value.type.tensor_type.shape.dim)


def _tensor(value, what: str, extra: str = "") -> str:
    tensor = value.type.tensor_type
    if tensor.elem_type not in _TRITON_TYPES:
        raise ValueError(
            f"ONNX {what} '{value.name}' has element type {tensor.elem_type}, "
            f"which this exporter does not map to a Triton type."
        )
    dims = tensor.shape.dim
    if not dims or dims[0].dim_value > 0:
        raise ValueError(
            f"ONNX {what} '{value.name}' has no dynamic batch axis (first dim "
            f"{dims[0].dim_value if dims else 'missing'}); Triton's dynamic batching needs one. "
            "Re-export with lightning_cls.export (its ONNX files have a dynamic 'batch' axis)."
        )
    rest = [d.dim_value if d.dim_value > 0 else -1 for d in dims[1:]]
    return (
        f'  {{\n    name: "{value.name}"\n    data_type: {_TRITON_TYPES[tensor.elem_type]}\n'
        f"    dims: [ {', '.join(map(str, rest))} ]\n" + (f"    {extra}\n" if extra else "") + "  }"
    )
