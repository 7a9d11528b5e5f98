"""``export_model``: every requested format (+ INT8) for one network, into one folder.

Shared by the ``python -m lightning_cls.export`` entry point and ``ExportCallback``.
``ExportConfig`` mirrors ``conf/export/*.yaml`` field for field. Each file format is a
``Writer`` in ``export.writer.FORMATS``, written through the one skeleton there
(``write_verified``: eval mode, temp name, read back through its runtime, compare, rename);
derived formats (INT8, ``export.int8``) are Writers there too, with their own check (the
accuracy gate); this module knows no format by name except the two steps built on written
files (``STEPS``) and ``ALL_FORMATS``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from lightning_cls.export.errors import AccuracyDropError
from lightning_cls.export.triton import TritonConfig, export_triton
from lightning_cls.export.writer import FORMATS, Tolerance, Writer, write_checked
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
    keep_first_conv_float: bool = True  # static: the first Conv (the stem) stays float

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
        self.formats = formats
        source = self.triton.source
        if "triton" in formats and source not in formats:
            raise ValueError(
                f"A Triton repository serves the {source} file (export.triton.source), but "
                f"'{source}' is not in export.formats={formats}; add it (export=triton does, "
                "export=triton_e2e for onnx_e2e)."
            )
        for writer, asked_by in self.writers(Path()):
            for needed in writer.requires:
                if needed not in formats:
                    raise ValueError(
                        f"{asked_by} makes {writer.title} from the {needed} file, but "
                        f"'{needed}' is not in export.formats={formats}; add it (e.g. "
                        f"export={needed})."
                    )

    def requested(self) -> dict[str, str]:
        """Each registered format this config asks for -> what asked for it, in ``FORMATS``
        order (the order ``export_model`` writes them): ``export.formats`` and the
        ``export.quantize`` flags (``export.int8.QUANTIZE_FLAGS``)."""
        from lightning_cls.export.int8 import QUANTIZE_FLAGS

        asked = {name: f"'{name}' in export.formats" for name in self.formats}
        for flag, name in QUANTIZE_FLAGS.items():
            if getattr(self.quantize, flag):
                asked[name] = f"export.quantize.{flag}=true"
        return {name: asked[name] for name in FORMATS if name in asked}

    def writers(self, out: Path) -> list[tuple[Writer, str]]:
        """The writers of every requested format, into folder ``out``, with what asked."""
        return [
            (writer, asked_by)
            for name, asked_by in self.requested().items()
            for writer in FORMATS[name](self, out)
        ]

    @property
    def enabled(self) -> bool:
        return bool(self.formats) or self.quantize.enabled

    @property
    def needs_data(self) -> bool:
        """A writer declares it (INT8 calibrates on the train split and is gated on the val
        split); auto validates every runtime on the val split."""
        return "auto" in self.formats or any(w.needs_data for w, _ in self.writers(Path()))

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
    """Export ``net`` as ``config`` says; writers that need data (INT8) calibrate and are
    gated on ``datamodule``.

    Raises ``AccuracyDropError`` (after writing everything else and the report) when an int8
    model loses more than ``config.quantize.max_acc_drop`` points and ``force`` is off.
    """
    out = Path(out_dir)
    writers = config.writers(out)
    splits = _splits(writers, spec, datamodule)  # before any work: a missing DataModule
    out.mkdir(parents=True, exist_ok=True)
    result = ExportResult()
    atomic_write_text(out / META_FILE, json.dumps(spec.to_dict(), indent=2) + "\n")
    errors = []
    tolerance = Tolerance(**config.check_kwargs)
    for writer, _ in writers:  # in FORMATS order: ONNX before OpenVINO, fp32 before INT8
        try:
            written = write_checked(writer, net, spec, out / writer.file, tolerance, splits)
        except AccuracyDropError as err:  # the gate refused it: the others still run
            log.warning("%s", err)
            result.reports.append(err.report)
            errors.append(str(err))
            continue
        result.paths[writer.key] = written.path
        if written.report is not None:
            result.reports.append(written.report)
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
    if result.reports:
        reports = [r.to_dict() for r in result.reports]
        atomic_write_text(out / REPORT_FILE, json.dumps(reports, indent=2) + "\n")
    for name, path in result.paths.items():
        log.info("%-22s %s (%.2f MB)", name, path, path.stat().st_size / 1e6)
    if errors:
        raise AccuracyDropError("\n".join(errors))
    return result


def _splits(writers: list[tuple[Writer, str]], spec: InputSpec, datamodule) -> dict | None:
    """The DataModule's splits, checked against ``spec``, if a writer needs data."""
    needing = [writer for writer, _ in writers if writer.needs_data]
    if not needing:
        return None
    if datamodule is None:
        titles = ", ".join(w.title for w in needing)
        raise ValueError(
            f"{titles} calibrate(s) on the train split and report(s) validation accuracy, so "
            "export needs a DataModule; pass data=<name> (e.g. data=cifar10) on the command line."
        )
    datamodule.setup("fit")
    # Calibrating on, and reporting accuracy against, other classes would be silently wrong.
    check_same_data(
        spec.to_dict(),
        datamodule.spec,
        "The model being quantized",
        data_name=f"data={getattr(datamodule, 'name', type(datamodule).__name__)}",
    )
    return datamodule.splits
