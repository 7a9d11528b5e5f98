"""OpenVINO export: ``model.xml`` + ``model.bin`` converted from the ONNX file, and INT8
through NNCF post-training quantization (calibrated on the train split).

``export=openvino`` runs ``openvino.convert_model`` on the verified ONNX export (the path the
OpenVINO docs recommend for PyTorch models that already export to ONNX), stores the input spec
in the model's ``rt_info``; the export skeleton (``export.writer``) reads the IR back through
``OpenVINORuntime`` and checks it against eager PyTorch in f32.
``lightning_cls.inference.openvino.OpenVINORuntime`` runs the result (``predict``, the server).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from lightning_cls.export.writer import Writer
from lightning_cls.fileio import atomic_paths
from lightning_cls.inference.openvino import (
    PRECISIONS,
    RT_SECTION,
    OpenVINORuntime,
    compile_model,
    read_rt_props,
    signal_stack_kept,
    spec_props,
)
from lightning_cls.inference.runtimes import FEATURES_OUTPUT
from lightning_cls.inference.spec import InputSpec, Split
from lightning_cls.training.precision import cpu_has_native_bf16

log = logging.getLogger(__name__)

PRESETS = ("performance", "mixed")


def _save(model, xml_path: Path) -> Path:
    """Write ``.xml`` + ``.bin`` under temp names; they land together (.bin first, .xml last)."""
    xml_path = Path(xml_path)
    with atomic_paths(xml_path.with_suffix(".bin"), xml_path) as (_, tmp_xml):
        _save_model(model, tmp_xml)
    return xml_path


def _save_model(model, xml_path: Path) -> None:
    """``xml_path`` and the ``.bin`` of the same stem beside it (weights as they are)."""
    import openvino as ov

    ov.save_model(model, str(xml_path), compress_to_fp16=False)


def _set_props(model, props: dict[str, str]) -> None:
    for key, value in props.items():
        model.set_rt_info(value, [RT_SECTION, key])


@dataclass
class OpenVINOOptions:
    """``export.openvino.*`` (conf/export/openvino.yaml)."""

    # f32, or bf16 (OpenVINO's own CPU default on bf16-capable CPUs; validate it with export=auto)
    precision: str = "f32"

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"export.openvino.precision={self.precision!r} is not one of {PRECISIONS}; "
                "e.g. export.openvino.precision=f32."
            )


class OpenVINOWriter(Writer):
    """``model.xml`` + ``model.bin``, converted from the verified ONNX file (``onnx_path``, or
    the ``onnx`` file of this export)."""

    key, file, companions, title = "openvino", "model.xml", (".bin",), "OpenVINO"
    requires, uses = ("onnx",), "OpenVINO converts the ONNX file"
    modules = ("onnx", "openvino")
    Options = OpenVINOOptions

    def __init__(self, onnx_path: str | Path | None = None, precision: str = "f32"):
        if precision not in PRECISIONS:
            raise ValueError(f"Unknown OpenVINO precision '{precision}'; use one of {PRECISIONS}.")
        self.onnx_path = Path(onnx_path) if onnx_path is not None else None
        self.precision = precision
        if onnx_path is not None:
            self.requires = ()  # given its source: no ONNX file of this export needed

    @classmethod
    def candidates(cls, options):
        found = {"ov_f32": cls()}
        if cpu_has_native_bf16():
            found["ov_bf16"] = cls(precision="bf16")
            found["ov_bf16"].file = "model_bf16.xml"
        return found

    def bind(self, files, data):
        if self.onnx_path is None and "onnx" in files:
            self.onnx_path = Path(files["onnx"])

    def copy_tagged(self, src, dst, key, text):
        return copy_tagged(src, dst, key, text)

    def write(self, net, example, tmp, spec):
        import openvino as ov

        if self.onnx_path is None or not self.onnx_path.is_file():
            raise FileNotFoundError(
                f"OpenVINO converts the ONNX export, and {self.onnx_path or 'model.onnx'} does not "
                "exist; "
                "export ONNX first."
            )
        model = ov.convert_model(str(self.onnx_path))
        _set_props(model, dict(spec_props(spec, self.precision)))
        _save_model(model, tmp)

    def read_back(self, path):
        runtime = OpenVINORuntime(path)  # what predict and the server open
        if runtime.precision == "f32":
            return runtime, runtime.spec
        # bf16 rounds by design: the check runs the same file in f32, where it must be exact.
        import openvino as ov

        return _F32(compile_model(ov.Core().read_model(str(path)), precision="f32")), runtime.spec


class _F32:
    """A bf16 IR compiled in f32 for the check: logits, and ``outputs`` (logits, features) as
    the runtime answers them (a feature-space rule's file has both)."""

    def __init__(self, compiled):
        self.compiled = compiled
        named = [o for o in compiled.outputs[1:] if FEATURES_OUTPUT in o.get_names()]
        self.features_output = named[0] if named else None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.outputs(x)[0]

    def outputs(self, x: torch.Tensor):
        result = self.compiled(x.numpy())
        logits = torch.from_numpy(result[self.compiled.output(0)].copy())
        if self.features_output is None:
            return logits, None
        return logits, torch.from_numpy(result[self.features_output].copy())


def copy_tagged(src: Path, dst: Path, key: str, text: str) -> Path:
    """``src`` (+ ``.bin``) copied to ``dst`` with ``text`` under ``key`` in its ``rt_info``."""
    import openvino as ov

    model = ov.Core().read_model(str(src))
    model.set_rt_info(text, [RT_SECTION, key])
    return _save(model, dst)  # .xml and .bin land together


def quantize_openvino_int8(
    xml_path: str | Path,
    int8_path: str | Path,
    calibration: Split,
    spec: InputSpec,
    num_batches: int = 8,
    batch_size: int = 32,
    preset: str = "performance",
    seed: int = 0,
) -> Path:
    """NNCF post-training INT8 of an OpenVINO IR, calibrated on seeded batches of a uint8 split.

    ``preset="performance"`` quantizes activations symmetrically (fastest on CPU);
    ``"mixed"`` makes them asymmetric (closer to the fp32 model when activations are skewed).
    """
    import nncf
    import openvino as ov

    from lightning_cls.export.quantize import calibration_batches

    if preset not in PRESETS:
        raise ValueError(f"Unknown NNCF preset '{preset}'; use one of {PRESETS}.")
    batches = calibration_batches(calibration, spec, num_batches, batch_size, seed)
    n = sum(len(b) for b in batches)
    model = ov.Core().read_model(str(xml_path))
    props = read_rt_props(model)
    with signal_stack_kept():  # NNCF compiles the model to collect its statistics
        quantized = nncf.quantize(
            model,
            nncf.Dataset(batches),
            preset=getattr(nncf.QuantizationPreset, preset.upper()),
            subset_size=len(batches),  # counted in dataset items (batches), not images
        )
    props["quantization"] = f"NNCF post-training int8, preset={preset}, {n} calibration images"
    _set_props(quantized, props)
    _save(quantized, Path(int8_path))
    log.info("Wrote %s (%s)", int8_path, props["quantization"])
    return Path(int8_path)
