"""The INT8 formats: derived ``Writer``s whose check is the accuracy gate (``export=int8``,
``export=auto``).

Each INT8 method is a ``Writer`` registered in ``FORMATS`` like any format, with a ``source``
format (the fp32 file it quantizes), ``needs_data`` (it calibrates on seeded batches of the
train split and is measured on the validation split) and one ``check`` hook: instead of parity
with eager PyTorch, the file (still under its temp name) is measured against its fp32 source
(``quantize.compare``) and gated (``quantize.enforce_max_drop``); the skeleton
(``writer.write_checked``) renames it only if it passes. A rejected INT8 leaves nothing at its
final name (an older file there, made from another fp32 model, is removed too); a kill leaves
at most a hidden temp. The ``export.quantize`` flags ask for them (``QUANTIZE_FLAGS``).

onnxruntime/nncf are imported where a file is written (the ``export``/``openvino`` extras), so
listing the formats needs neither.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from lightning_cls.export.errors import AccuracyDropError
from lightning_cls.export.writer import Writer, register_format, write_verified
from lightning_cls.inference.predictor import load_artifact

log = logging.getLogger(__name__)

# export.quantize.<flag>=true -> the INT8 format it asks for (in FORMATS, registered below)
QUANTIZE_FLAGS = {
    "static": "onnx_static_int8",  # ONNX Runtime static, from model.onnx
    "dynamic": "torch_dynamic_int8",  # torch.ao dynamic (nn.Linear only), as TorchScript
    "openvino": "openvino_nncf_int8",  # NNCF post-training, from model.xml
}


@dataclass
class Gate:
    """The accuracy gate: how many points an INT8 file may lose on the validation split."""

    max_acc_drop: float = 1.0
    force: bool = False  # keep a file that loses more (with a warning)
    latency_runs: int = 50  # batch-1 latency timing in the report (0: not timed)
    reference_acc: float | None = None  # the baseline (default: the fp32 source's accuracy)


@dataclass
class Calibration:
    """The seeded train batches every calibrating method sees."""

    batches: int = 8
    batch_size: int = 32


class Int8Writer(Writer):
    """An INT8 file made from the fp32 file ``source_path``; its check is the accuracy gate.
    Subclasses implement ``write(net, example, tmp, spec, data)``."""

    needs_data = True
    features = False  # made from a file (or, dynamic, through a TorchScript writer of its own)

    def __init__(
        self,
        source_path: str | Path,
        gate: Gate | None = None,
        calibration: Calibration | None = None,
        method: str = "",
        file: str = "",
    ):
        self.source_path = Path(source_path)
        self.gate, self.calibration = gate or Gate(), calibration or Calibration()
        self.method = method or self.method  # the report's name for it
        self.file = file or self.file

    def check(self, net, run, spec, tmp, path, data, tolerance):
        from lightning_cls.export.quantize import compare, enforce_max_drop

        g = self.gate
        # Our own files, just written: TorchScript is trusted here.
        before = load_artifact(self.source_path, trust_artifact=True)
        after = load_artifact(tmp, trust_artifact=True)
        report = compare(self.method, before, after, data["val"], g.latency_runs, g.reference_acc)
        report.int8_path = str(path)
        try:
            enforce_max_drop(report, g.max_acc_drop, g.force)  # removes an older file at path
        except AccuracyDropError as err:
            report.accepted, report.error = False, str(err)
            raise AccuracyDropError(str(err), report) from None
        return report


class OnnxStaticInt8Writer(Int8Writer):
    """``model_int8.onnx``: ONNX Runtime static INT8 of ``model.onnx`` (QDQ or QOperator)."""

    key, file, title, source, method = (
        "onnx_int8",
        "model_int8.onnx",
        "ONNX Runtime static INT8",
        "onnx",
        "onnx_static_int8",
    )

    def __init__(
        self,
        source_path,
        gate=None,
        calibration=None,
        method="",
        file="",
        per_channel: bool = True,
        activation_type: str = "uint8",
        quant_format: str = "qdq",
        keep_first_conv_float: bool = True,
    ):
        super().__init__(source_path, gate, calibration, method, file)
        self.per_channel, self.activation_type = per_channel, activation_type
        self.quant_format, self.keep_first_conv_float = quant_format, keep_first_conv_float

    def write(self, net, example, tmp, spec, data):
        from lightning_cls.export.quantize import SplitCalibrationReader, quantize_onnx_static

        c = self.calibration
        quantize_onnx_static(
            self.source_path,
            tmp,
            SplitCalibrationReader(data["train"], spec, c.batches, c.batch_size),
            self.per_channel,
            self.activation_type,
            self.quant_format,
            keep_first_conv_float=self.keep_first_conv_float,
        )


class OpenVINOInt8Writer(Int8Writer):
    """``model_int8.xml`` + ``.bin``: NNCF post-training INT8 of the OpenVINO IR."""

    key, file, companions, title, source, method = (
        "openvino_int8",
        "model_int8.xml",
        (".bin",),
        "OpenVINO NNCF INT8",
        "openvino",
        "openvino_nncf_int8",
    )

    def write(self, net, example, tmp, spec, data):
        from lightning_cls.export.openvino import quantize_openvino_int8

        c = self.calibration
        quantize_openvino_int8(self.source_path, tmp, data["train"], spec, c.batches, c.batch_size)


class TorchDynamicInt8Writer(Int8Writer):
    """``model_int8_dynamic.torchscript``: torch.ao dynamic INT8 (``nn.Linear`` only) of the
    eager network, traced and parity-checked against the quantized network; gated against
    ``model_trace.torchscript``, which its format writes first when it is not requested."""

    key, file, title, source, method = (
        "torchscript_int8_dynamic",
        "model_int8_dynamic.torchscript",
        "torch dynamic INT8",
        "torchscript",
        "torch_dynamic_int8",
    )
    requires = ()  # it quantizes the eager network; its fp32 trace comes with it if needed

    def __init__(self, source_path, gate=None, calibration=None, method="", file="", check=None):
        super().__init__(source_path, gate, calibration, method, file)
        self.check_kwargs = check or {}

    def write(self, net, example, tmp, spec, data):
        from lightning_cls.export.quantize import quantize_torch_dynamic
        from lightning_cls.export.torchscript import TorchScriptWriter

        if net is None:
            raise ValueError("torch_dynamic_int8 quantizes the eager network; pass net=.")
        quantized = quantize_torch_dynamic(net)
        write_verified(TorchScriptWriter("trace"), quantized, spec, tmp, **self.check_kwargs)


def _gate(config) -> tuple[Gate, Calibration]:
    q = config.quantize
    gate = Gate(q.max_acc_drop, q.force, q.latency_runs)
    return gate, Calibration(q.calibration_batches, q.calibration_batch_size)


def onnx_static_writers(config, out: Path) -> list[Writer]:
    q = config.quantize
    return [
        OnnxStaticInt8Writer(
            out / "model.onnx",
            *_gate(config),
            per_channel=q.per_channel,
            activation_type=q.activation_type,
            quant_format=q.format,
            keep_first_conv_float=q.keep_first_conv_float,
        )
    ]


def torch_dynamic_writers(config, out: Path) -> list[Writer]:
    from lightning_cls.export.torchscript import TorchScriptWriter

    trace = TorchScriptWriter("trace")
    dynamic = TorchDynamicInt8Writer(out / trace.file, *_gate(config), check=config.check_kwargs)
    asked = "torchscript" in config.formats and "trace" in config.torchscript_modes
    return [dynamic] if asked else [trace, dynamic]


def openvino_writers(config, out: Path) -> list[Writer]:
    return [OpenVINOInt8Writer(out / "model.xml", *_gate(config))]


register_format("onnx_static_int8", onnx_static_writers)
register_format("torch_dynamic_int8", torch_dynamic_writers)
register_format("openvino_nncf_int8", openvino_writers)
