"""INT8 formats: writers derived from an fp32 file, checked by the accuracy gate.

Each INT8 method is a ``Writer`` (``export.writer``) with a source (``requires``: the fp32 file
it quantizes, by result key) and one check hook, the gate. The one skeleton writes it under a
temp name; ``Int8Writer.check`` measures it on the validation split against its source (or
against ``ExportData.reference_acc``: ``export=auto`` gates every runtime against eager
PyTorch) and raises ``AccuracyDropError`` for a drop of more than ``max_acc_drop`` points
before the rename, removing an older file at the final name too (``enforce_max_drop``); a kill
leaves at most a hidden temp. ONNX Runtime static QDQ/QOperator, NNCF and LiteRT's PT2E
calibrate on the same seeded ``calibration_batches`` of the train split; torch dynamic needs no
calibration.
``export=int8`` and ``export=auto`` run these same writers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lightning_cls.export import litert, onnx, openvino, torchscript
from lightning_cls.export.errors import AccuracyDropError
from lightning_cls.export.quantize import (
    SplitCalibrationReader,
    calibration_batches,
    compare,
    enforce_max_drop,
    quantize_onnx_static,
    quantize_torch_dynamic,
)
from lightning_cls.export.torchscript import TorchScriptWriter
from lightning_cls.export.writer import Writer
from lightning_cls.inference.predictor import load_artifact


@dataclass
class Int8Options:
    """``export.int8.*`` (conf/export/int8.yaml): the options every INT8 writer shares."""

    calibration_batches: int = 8
    calibration_batch_size: int = 32
    per_channel: bool = True
    activation_type: str = "uint8"
    max_acc_drop: float = 1.0  # accuracy points on the validation split
    force: bool = False  # keep an int8 file even if it drops more than max_acc_drop
    latency_runs: int = 50
    format: str = "qdq"  # static int8 ONNX layout: qdq or qoperator
    keep_first_conv_float: bool = True  # static: the first Conv (the stem) stays float


class Int8Writer(Writer):
    """An INT8 file made from the fp32 file ``requires[0]`` names; ``method`` names it in the
    report. ``quantize`` holds its options (``export.int8.*``, one entry for every INT8 format)."""

    method: str = ""
    needs_data = "INT8 quantization calibrates on the train split and reports validation accuracy"
    features = False  # made from a written file, which has its outputs already
    Options, options_entry = Int8Options, "int8"

    def __init__(self, quantize: Int8Options | None = None, file: str | None = None):
        self.quantize = quantize or Int8Options()
        if file is not None:
            self.file = file
        self.source_path: Path | None = None
        self.data = None
        self.report = None  # the QuantizationReport of the last check

    @classmethod
    def from_options(cls, options, config):
        return [cls(options)]

    def bind(self, files, data):
        self.source_path, self.data = Path(files[self.requires[0]]), data

    def read_back(self, path):
        predictor = load_artifact(path, trust_artifact=True)  # our own file, just written
        return predictor, predictor.spec

    def check(self, model, run, spec, path, batch_sizes, atol, rtol):
        """The accuracy gate: ``run`` (the INT8 file) against its source on the val split."""
        q = self.quantize
        before = load_artifact(self.source_path, trust_artifact=True)
        reference = self.data.reference_acc
        report = compare(self.method, before, run, self.data.val, q.latency_runs, reference)
        report.int8_path, self.report = str(path), report
        try:
            # Removes an older file at path (and its companions) too.
            enforce_max_drop(report, q.max_acc_drop, q.force, self.companions)
        except AccuracyDropError as err:
            report.accepted, report.error = False, str(err)
            raise
        return (
            f"checked: val {report.metric} {100 * report.acc_before:.2f}% -> "
            f"{100 * report.acc_after:.2f}% against its source"
        )

    def calibration(self, spec) -> SplitCalibrationReader:
        q = self.quantize
        train = self.data.train
        return SplitCalibrationReader(train, spec, q.calibration_batches, q.calibration_batch_size)


class OnnxStaticInt8(Int8Writer):
    """``model_int8.onnx``: ONNX Runtime static INT8 (QDQ or QOperator) of ``model.onnx``, the
    graph's first Conv kept float unless ``export.int8.keep_first_conv_float=false``."""

    key, file, title, method = "onnx_int8", "model_int8.onnx", "ONNX INT8", "onnx_static_int8"
    requires, uses = ("onnx",), "onnx_int8 quantizes the ONNX file"
    modules = ("onnx", "onnxruntime")
    copy_tagged = staticmethod(onnx.copy_tagged)

    @classmethod
    def candidates(cls, options):
        qdq = dataclasses.replace(options, format="qdq")
        qop = dataclasses.replace(options, format="qoperator")
        return {"ort_int8_qdq": cls(qdq), "ort_int8_qoperator": cls(qop, "model_int8_qop.onnx")}

    def write(self, net, example, tmp, spec):
        q = self.quantize
        reader = self.calibration(spec)
        quantize_onnx_static(
            self.source_path,
            tmp,
            reader,
            q.per_channel,
            q.activation_type,
            q.format,
            keep_first_conv_float=q.keep_first_conv_float,
        )


class TorchDynamicInt8(Int8Writer):
    """``model_int8_dynamic.torchscript``: torch.ao dynamic INT8 of every ``nn.Linear``, traced;
    gated against the traced fp32 file (written too, when export.formats has no torchscript)."""

    key, file, title = "torchscript_int8_dynamic", "model_int8_dynamic.torchscript", "INT8"
    method = "torch_dynamic_int8"
    requires = ("torchscript_trace",)
    uses = "torchscript_int8_dynamic compares with the traced TorchScript file"
    features = True  # quantizes the network itself: its features output too
    copy_tagged = staticmethod(torchscript.copy_tagged)

    @classmethod
    def from_options(cls, options, config):
        return [TorchScriptWriter("trace"), cls(options)]

    def write(self, net, example, tmp, spec):
        if net is None:
            raise ValueError("torch_dynamic_int8 quantizes the eager network; pass net=.")
        TorchScriptWriter("trace").write(quantize_torch_dynamic(net), example, tmp, spec)


class OpenVINOInt8(Int8Writer):
    """``model_int8.xml`` + ``.bin``: NNCF post-training INT8 of the OpenVINO IR."""

    key, file, companions = "openvino_int8", "model_int8.xml", (".bin",)
    title, method = "OpenVINO INT8", "openvino_nncf_int8"
    requires, uses = ("openvino",), "openvino_int8 quantizes the OpenVINO IR"
    modules = ("openvino", "nncf")
    copy_tagged = staticmethod(openvino.copy_tagged)

    @classmethod
    def candidates(cls, options):
        return {"ov_int8": cls(options)}

    def write(self, net, example, tmp, spec):
        q = self.quantize
        train = self.data.train
        openvino.quantize_openvino_int8(
            self.source_path, tmp, train, spec, q.calibration_batches, q.calibration_batch_size
        )


class LiteRTInt8(Int8Writer):
    """``model_int8.tflite``: litert-torch's PT2E static INT8 of the network (symmetric,
    per-channel weights, int8 in and out), converted like ``model.tflite`` in the converter's
    environment and gated against it (written too, when export.formats has no litert)."""

    key, file, title, method = "litert_int8", "model_int8.tflite", "LiteRT INT8", "litert_pt2e_int8"
    requires, uses = ("litert",), "export=litert_int8 is gated against the fp32 LiteRT file"
    modules, extra = litert.LiteRTWriter.modules, litert.LiteRTWriter.extra
    features = True  # quantizes the network itself: its features output too

    @classmethod
    def available(cls) -> bool:
        return litert.LiteRTWriter.available()

    @classmethod
    def unavailable(cls) -> str:
        return litert.LiteRTWriter.unavailable()

    @classmethod
    def from_options(cls, options, config):
        return [litert.LiteRTWriter(), cls(options)]

    def write(self, net, example, tmp, spec):
        if net is None:
            raise ValueError("litert_pt2e_int8 quantizes the eager network; pass net=.")
        q = self.quantize
        batches = calibration_batches(
            self.data.train, spec, q.calibration_batches, q.calibration_batch_size
        )
        litert.write_tflite(net, example, tmp, spec, np.concatenate(batches))
