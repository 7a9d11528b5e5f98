"""``export_model``: every requested format (INT8, Triton and ``auto`` included) for one
network, into one folder.

Shared by the ``python -m lightning_cls.export`` entry point and ``ExportCallback``.
``ExportConfig`` mirrors ``conf/export/*.yaml`` field for field. Every format is a ``Writer``
registered in ``export.writer.FORMATS``; ``ExportConfig.writers`` asks each requested one for
its writers and orders them by what they require, and ``export_model`` runs them in that order
through ``Writer.export`` (the one skeleton of ``export.writer``). This module names no format.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from lightning_cls.export.errors import AccuracyDropError
from lightning_cls.export.triton import TritonConfig
from lightning_cls.export.writer import FORMATS, ExportData, Writer, in_order, writers_of
from lightning_cls.fileio import atomic_write_text
from lightning_cls.inference.network import check_same_data
from lightning_cls.inference.spec import META_FILE, InputSpec

log = logging.getLogger(__name__)

# export=all. Not in it: openvino needs the `openvino` extra; auto measures every runtime
# (slow); onnx_e2e is a second ONNX file for servers outside lightning_cls (uint8 NHWC in).
ALL_FORMATS = ("onnx", "torchscript", "pt2")
# ... and these where their extra (and converter) is installed; the others are named and skipped.
ALL_IF_INSTALLED = ("executorch", "litert", "coreml")
REPORT_FILE = "quantization_report.json"
# export.quantize's switches (conf/export/int8.yaml, openvino.yaml) -> the INT8 format each asks for
QUANTIZE_SWITCHES = {
    "static": "onnx_int8",
    "dynamic": "torchscript_int8_dynamic",
    "openvino": "openvino_int8",
}


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
    keep_first_conv_float: bool = True  # static: the first Conv (the stem) stays float

    @property
    def enabled(self) -> bool:
        return bool(self.formats)

    @property
    def formats(self) -> list[str]:
        """The INT8 formats (``FORMATS`` names) these switches ask for; any other INT8 format
        is asked for by name in ``export.formats``."""
        return [name for flag, name in QUANTIZE_SWITCHES.items() if getattr(self, flag)]


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
        # export=all: a format it took may be skipped for the model (``accepted``), not refused
        self.from_all = list(self.formats) == ["all"]
        formats = all_formats() if self.from_all else list(self.formats)
        unknown = [name for name in formats if name not in FORMATS]
        if unknown:
            raise ValueError(
                f"Unknown export format(s) {unknown}; use {', '.join(FORMATS)} or 'all'."
            )
        self.formats = formats
        self.writers(Path("."))  # what each writer requires is here: refused before any work

    def writers(self, out: Path) -> list[Writer]:
        """Every writer this config asks for (one per result key), each after its sources."""
        names = [*self.formats, *(n for n in self.quantize.formats if n not in self.formats)]
        writers: dict[str, Writer] = {}
        for name in names:
            for writer in writers_of(name, self, out):
                writers.setdefault(writer.key, writer)
        return in_order(list(writers.values()), self.formats)

    @property
    def enabled(self) -> bool:
        return bool(self.formats) or self.quantize.enabled

    @property
    def needs_data(self) -> bool:
        """Whether a writer needs the DataModule (INT8 calibrates, INT8 and auto validate)."""
        return any(writer.needs_data for writer in self.writers(Path(".")))

    @property
    def check_kwargs(self) -> dict:
        """The parity-check settings of ``write_verified`` (every format's check)."""
        return {"check_batch_sizes": self.check_batch_sizes, "atol": self.atol, "rtol": self.rtol}


def all_formats() -> list[str]:
    """``export=all``: ``ALL_FORMATS`` and those of ``ALL_IF_INSTALLED`` this machine can
    write; each one skipped is logged with its reason (the extra to install)."""
    formats = list(ALL_FORMATS)
    for name in ALL_IF_INSTALLED:
        reason = FORMATS.get(name).unavailable()
        if reason:
            log.warning("export=all skips %s: %s", name, reason)
        else:
            formats.append(name)
    return formats


@dataclass
class ExportResult:
    paths: dict[str, Path] = field(default_factory=dict)
    reports: list = field(default_factory=list)  # QuantizationReport


def export_model(
    net: nn.Module, spec: InputSpec, out_dir: str | Path, config: ExportConfig, datamodule=None
) -> ExportResult:
    """Export ``net`` as ``config`` says; writers with ``needs_data`` use ``datamodule``.

    Raises ``AccuracyDropError`` (after writing everything else and the INT8 report) when an
    INT8 model loses more than ``config.quantize.max_acc_drop`` points and ``force`` is off.
    """
    out = Path(out_dir)
    writers = accepted(config.writers(out), spec, config)
    data = export_data(writers, spec, datamodule)
    out.mkdir(parents=True, exist_ok=True)
    result = ExportResult()
    atomic_write_text(out / META_FILE, json.dumps(spec.to_dict(), indent=2) + "\n")
    errors = []
    for writer in writers:
        writer.bind(result.paths, data)
        try:
            path = writer.export(net, spec, out / writer.file, **config.check_kwargs)
            result.paths[writer.key] = path
        except AccuracyDropError as err:
            log.warning("%s", err)
            errors.append(str(err))
        if getattr(writer, "report", None) is not None:
            result.reports.append(writer.report)
    if result.reports:
        reports = [r.to_dict() for r in result.reports]
        atomic_write_text(out / REPORT_FILE, json.dumps(reports, indent=2) + "\n")
    for name, path in result.paths.items():
        log.info("%-22s %s (%.2f MB)", name, path, path.stat().st_size / 1e6)
    if errors:
        raise AccuracyDropError("\n".join(errors))
    return result


def accepted(writers: list[Writer], spec: InputSpec, config: ExportConfig) -> list[Writer]:
    """The writers whose format can carry the model ``spec`` describes (Core ML cannot carry a
    feature-space rule): one that cannot is refused, one line naming why and the fix, before
    anything is written; where ``export=all`` took it, it is skipped with that reason logged."""
    kept = []
    for writer in writers:
        reason = writer.refuses(spec)
        if not reason:
            kept.append(writer)
        elif config.from_all and writer.key in ALL_IF_INSTALLED:
            log.warning("export=all skips %s: %s", writer.key, reason)
        else:
            raise ValueError(f"export={writer.key}: {reason}")
    return kept


def export_data(writers: list[Writer], spec: InputSpec, datamodule) -> ExportData | None:
    """The splits the writers that ``needs_data`` use, checked against the model's spec."""
    reasons = [writer.needs_data for writer in writers if writer.needs_data]
    if not reasons:
        return None
    if datamodule is None:
        raise ValueError(
            f"{reasons[0]}, so it needs a DataModule; pass data=<name> (e.g. data=cifar10) on "
            "the command line."
        )
    datamodule.setup("fit")
    # Calibrating on, and reporting accuracy against, other classes would be silently wrong.
    check_same_data(
        spec.to_dict(),
        datamodule.spec,
        "The model being exported",
        data_name=f"data={getattr(datamodule, 'name', type(datamodule).__name__)}",
    )
    return ExportData(datamodule.splits["train"], datamodule.splits["val"], datamodule=datamodule)
