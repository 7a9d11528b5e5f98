"""``export_model``: every requested format (+ INT8) for one network, into one folder.

Shared by the ``python -m lightning_cls.export`` entry point and ``ExportCallback``.
``ExportConfig`` mirrors ``conf/export/*.yaml`` field for field. Each file format is a
``Writer`` in ``export.writer.FORMATS``, written through the one skeleton there
(``write_verified``: eval mode, temp name, read back through its runtime, compare, rename);
this module knows no format by name except the two steps built on written files (``STEPS``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from lightning_cls.export.errors import AccuracyDropError
from lightning_cls.export.triton import TritonConfig, export_triton
from lightning_cls.export.writer import FORMATS, write_verified
from lightning_cls.fileio import atomic_write_text
from lightning_cls.inference.network import check_same_data
from lightning_cls.inference.spec import META_FILE, InputSpec

log = logging.getLogger(__name__)

# export=all. Not in it: openvino needs the `openvino` extra; auto measures every runtime
# (slow); onnx_e2e is a second ONNX file for servers outside lightning_cls (uint8 NHWC in).
ALL_FORMATS = ("onnx", "torchscript", "pt2")
# Not writers: steps built on the files the writers wrote. "auto" writes and times several
# runtimes and keeps the fastest (export.auto); "triton" wraps the onnx/onnx_e2e file in a
# Triton model repository.
STEPS = ("auto", "triton")
REPORT_FILE = "quantization_report.json"


@dataclass
class QuantizeConfig:
    static: bool = False  # ONNX Runtime static int8 (needs "onnx" in formats)
    dynamic: bool = False  # torch.ao dynamic int8 on nn.Linear, saved as TorchScript
    calibration_batches: int = 8
    calibration_batch_size: int = 32
    per_channel: bool = True
    activation_type: str = "uint8"
    max_acc_drop: float = 1.0  # accuracy points on the validation split
    force: bool = False  # keep an int8 file even if it drops more than max_acc_drop
    latency_runs: int = 50
    format: str = "qdq"  # static int8 ONNX layout: qdq or qoperator
    openvino: bool = False  # NNCF int8 of the OpenVINO IR (needs "openvino" in formats)

    @property
    def enabled(self) -> bool:
        return self.static or self.dynamic or self.openvino


@dataclass
class ExportConfig:
    formats: list[str] = field(default_factory=list)
    opset: int = 18
    torchscript_modes: list[str] = field(default_factory=lambda: ["trace", "script"])
    check_batch_sizes: list[int] = field(default_factory=lambda: [1, 7])
    atol: float = 1e-4
    rtol: float = 1e-3
    quantize: QuantizeConfig = field(default_factory=QuantizeConfig)
    openvino_precision: str = "f32"  # or bf16 (OpenVINO's CPU default where supported)
    auto: dict = field(default_factory=dict)  # lightning_cls.export.auto.AutoConfig fields
    triton: TritonConfig = field(default_factory=TritonConfig)

    def __post_init__(self):
        if isinstance(self.quantize, dict):
            self.quantize = QuantizeConfig(**self.quantize)
        if isinstance(self.triton, dict):
            self.triton = TritonConfig(**self.triton)
        self.auto = dict(self.auto or {})
        self.torchscript_modes = list(self.torchscript_modes)
        self.check_batch_sizes = [int(b) for b in self.check_batch_sizes]
        formats = list(ALL_FORMATS) if list(self.formats) == ["all"] else list(self.formats)
        known = (*FORMATS, *STEPS)
        unknown = sorted(set(formats) - set(known))
        if unknown:
            raise ValueError(
                f"Unknown export format(s) {unknown}; use {', '.join(known)} or 'all'."
            )
        source = self.triton.source
        if "triton" in formats and source not in formats:
            raise ValueError(
                f"A Triton repository serves the {source} file (export.triton.source), but "
                f"'{source}' is not in export.formats={formats}; add it (export=triton does, "
                "export=triton_e2e for onnx_e2e)."
            )
        if "openvino" in formats and "onnx" not in formats:
            raise ValueError(
                f"OpenVINO converts the ONNX file, but 'onnx' is not in export.formats={formats}; "
                "add it (export=openvino does)."
            )
        if self.quantize.openvino and "openvino" not in formats:
            raise ValueError(
                "export.quantize.openvino=true quantizes the OpenVINO IR, but 'openvino' is not "
                f"in export.formats={formats}; add it (e.g. export=openvino)."
            )
        self.formats = formats
        if self.quantize.static and "onnx" not in formats:
            raise ValueError(
                "export.quantize.static=true quantizes the ONNX file, but 'onnx' is not in "
                f"export.formats={formats}; add it (e.g. export=onnx)."
            )

    @property
    def enabled(self) -> bool:
        return bool(self.formats) or self.quantize.enabled

    @property
    def needs_data(self) -> bool:
        """INT8 calibrates on the train split; INT8 and auto validate on the val split."""
        return self.quantize.enabled or "auto" in self.formats

    @property
    def check_kwargs(self) -> dict:
        """The parity-check settings of ``write_verified`` (every format's check)."""
        return {"check_batch_sizes": self.check_batch_sizes, "atol": self.atol, "rtol": self.rtol}


@dataclass
class ExportResult:
    paths: dict[str, Path] = field(default_factory=dict)
    reports: list = field(default_factory=list)  # QuantizationReport


def export_model(
    net: nn.Module, spec: InputSpec, out_dir: str | Path, config: ExportConfig, datamodule=None
) -> ExportResult:
    """Export ``net`` as ``config`` says; quantization calibrates and validates on ``datamodule``.

    Raises ``AccuracyDropError`` (after writing everything else and the report) when an int8
    model loses more than ``config.quantize.max_acc_drop`` points and ``force`` is off.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = ExportResult()
    atomic_write_text(out / META_FILE, json.dumps(spec.to_dict(), indent=2) + "\n")
    for name, writers in FORMATS.items():  # in registration order: ONNX before OpenVINO
        if name in config.formats:
            for writer in writers(config, out):
                path = out / writer.file
                result.paths[writer.key] = write_verified(
                    writer, net, spec, path, **config.check_kwargs
                )
    if "auto" in config.formats:
        from lightning_cls.export.auto import AutoConfig, export_auto

        if datamodule is None:
            raise ValueError(
                "export=auto checks each runtime's accuracy on the validation split, so it "
                "needs a DataModule; pass data=<name> (e.g. data=cifar10) on the command line."
            )
        auto = export_auto(
            net, spec, out / "auto", datamodule, AutoConfig(**config.auto), config.check_kwargs
        )
        result.paths["auto"] = auto.path
    if "triton" in config.formats:
        result.paths["triton"] = export_triton(
            result.paths[config.triton.source], out / "triton", spec, config.triton
        ).parent
    if config.quantize.enabled:
        _quantize(net, spec, out, config, datamodule, result)
    for name, path in result.paths.items():
        log.info("%-22s %s (%.2f MB)", name, path, path.stat().st_size / 1e6)
    return result


def _quantize(net, spec, out: Path, config: ExportConfig, datamodule, result: ExportResult) -> None:
    """Each requested INT8 model through the one gated path (``export.int8.quantize_gated``)."""
    from lightning_cls.export.int8 import METHODS, int8_writer, quantize_gated
    from lightning_cls.export.torchscript import export_torchscript

    qc = config.quantize
    if datamodule is None:
        raise ValueError(
            "INT8 quantization calibrates on the train split and reports validation accuracy, "
            "so it needs a DataModule; pass data=<name> (e.g. data=cifar10) on the command line."
        )
    datamodule.setup("fit")
    # Calibrating on, and reporting accuracy against, other classes would be silently wrong.
    check_same_data(
        spec.to_dict(),
        datamodule.spec,
        "The model being quantized",
        data_name=f"data={getattr(datamodule, 'name', type(datamodule).__name__)}",
    )
    train, val = datamodule.splits["train"], datamodule.splits["val"]
    kw = config.check_kwargs
    todo = []  # (method, result key, fp32 file)
    if qc.static:
        todo.append(("onnx_static_int8", "onnx_int8", result.paths["onnx"]))
    if qc.dynamic:
        fp32 = result.paths.get("torchscript_trace") or export_torchscript(
            net, spec, out / "model_trace.torchscript", "trace", **kw
        )
        result.paths["torchscript_trace"] = fp32
        todo.append(("torch_dynamic_int8", "torchscript_int8_dynamic", fp32))
    if qc.openvino:
        todo.append(("openvino_nncf_int8", "openvino_int8", result.paths["openvino"]))
    errors = []
    for method, key, fp32 in todo:
        write = int8_writer(
            method,
            fp32,
            spec,
            train,
            net,
            qc.calibration_batches,
            qc.calibration_batch_size,
            qc.per_channel,
            qc.activation_type,
            qc.format,
            kw,
        )
        dst = out / METHODS[method]
        report = quantize_gated(
            method, fp32, dst, write, val, qc.max_acc_drop, qc.force, qc.latency_runs
        )
        result.reports.append(report)
        if report.accepted:
            result.paths[key] = dst
        else:
            errors.append(report.error)
    reports = [r.to_dict() for r in result.reports]
    atomic_write_text(out / REPORT_FILE, json.dumps(reports, indent=2) + "\n")
    if errors:
        raise AccuracyDropError("\n".join(errors))
