"""``export_model``: every requested format (INT8, Triton and ``auto`` included) for one
network, into one folder.

Shared by the ``python -m lightning_cls.export`` entry point and ``ExportCallback``.
``ExportConfig`` mirrors ``conf/export/*.yaml``: the skeleton's own fields (formats and the
parity check) and each writer's entry (``export.onnx.opset``), handed to that writer alone.
Every format is a ``Writer`` registered in ``export.writer.FORMATS``; ``ExportConfig.writers``
asks each requested one for its writers (from its own options) and orders them by what they
require, and ``export_model`` runs them in that order
through ``Writer.export`` (the one skeleton of ``export.writer``). Apart from ``export=all``'s
list and the reader of the old layout's keys, this module names no format.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from lightning_cls.export.errors import AccuracyDropError
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
# The old layout, every option at the top of ``export``: key -> its writer's entry and option.
MOVED = {
    "opset": ("onnx", "opset"),
    "torchscript_modes": ("torchscript", "modes"),
    "openvino_precision": ("openvino", "precision"),
}
# ... and ``export.quantize``: its switches asked for INT8 formats, its other keys are now the
# INT8 writers' options (``export.int8.*``, conf/export/int8.yaml).
QUANTIZE_SWITCHES = {
    "static": "onnx_int8",
    "dynamic": "torchscript_int8_dynamic",
    "openvino": "openvino_int8",
}
OLD_KEYS = (*MOVED, "quantize")


@dataclass(init=False)
class ExportConfig:
    """What ``export_model`` writes: the formats, the parity check every format passes, and
    each writer's own options by its entry (``options["onnx"] == {"opset": 18}``; the
    ``export.onnx.*`` keys of conf/export/onnx.yaml), handed to that writer alone.

    Entries may also be given as keyword arguments (``ExportConfig(["onnx"], onnx={"opset":
    17})``), as Hydra does from ``conf/export/*.yaml``. The old keys (``opset``,
    ``torchscript_modes``, ``openvino_precision``, ``quantize``) are still read, each with one
    deprecation line naming its new key (configs saved in run folders use them)."""

    formats: list[str]
    check_batch_sizes: list[int]
    atol: float
    rtol: float
    options: dict[str, dict[str, Any]]

    def __init__(
        self,
        formats: Sequence[str] = (),
        check_batch_sizes: Sequence[int] = (1, 7),
        atol: float = 1e-4,
        rtol: float = 1e-3,
        options: Mapping[str, Any] | None = None,
        **entries: Any,
    ):
        formats = list(formats)
        merged = {name: as_mapping(value) for name, value in (options or {}).items()}
        old = {key: entries.pop(key) for key in OLD_KEYS if key in entries}
        for name, value in entries.items():
            merged[name] = {**merged.get(name, {}), **as_mapping(value)}
        switched: dict[str, bool] = {}  # export.quantize's switches: format -> on/off
        for key, value in old.items():
            switched.update(translate(key, value, merged))
        self.options = merged
        self.check_batch_sizes = [int(b) for b in check_batch_sizes]
        self.atol, self.rtol = atol, rtol
        # export=all: a format it took may be skipped for the model (``accepted``), not refused
        self.from_all = formats == ["all"]
        formats = all_formats() if self.from_all else formats
        formats = [name for name in formats if switched.get(name, True)]
        formats += [name for name, on in switched.items() if on and name not in formats]
        unknown = [name for name in formats if name not in FORMATS]
        if unknown:
            raise ValueError(
                f"Unknown export format(s) {unknown}; use {', '.join(FORMATS)} or 'all'."
            )
        self.formats = formats
        self.writers()  # each writer's options and requirements: refused before any work

    def writers(self) -> list[Writer]:
        """Every writer this config asks for (one per result key), each after its sources."""
        writers: dict[str, Writer] = {}
        for name in self.formats:
            for writer in writers_of(name, self):
                writers.setdefault(writer.key, writer)
        return in_order(list(writers.values()), self.formats)

    @property
    def enabled(self) -> bool:
        return bool(self.formats)

    @property
    def needs_data(self) -> bool:
        """Whether a writer needs the DataModule (INT8 calibrates, INT8 and auto validate)."""
        return any(writer.needs_data for writer in self.writers())

    @property
    def check_kwargs(self) -> dict:
        """The parity-check settings of ``write_verified`` (every format's check)."""
        return {"check_batch_sizes": self.check_batch_sizes, "atol": self.atol, "rtol": self.rtol}


def as_mapping(value: Any) -> dict[str, Any]:
    """A writer's entry as a plain dict (given as a mapping, or as its ``Options`` object)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dict(vars(value))
    if not isinstance(value, Mapping):
        raise ValueError(
            f"An export writer's options are a mapping of option: value, not {value!r}; "
            "e.g. export.onnx.opset=18."
        )
    return dict(value)


def translate(key: str, value: Any, entries: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """The old key ``key`` moved into ``entries`` (an option), with one deprecation line
    naming the new key; returns the formats ``export.quantize``'s switches turned on or off."""
    if key in MOVED:
        entry, option = MOVED[key]
        value = list(value) if isinstance(value, list | tuple) else value
        entries.setdefault(entry, {})[option] = value
        shown = hydra_value(value)
        warn_moved(f"export.{key}={shown}", f"export.{entry}.{option}={shown}")
        return {}
    quantize, switched, new = as_mapping(value), {}, []
    quantize.pop("_target_", None)
    for switch, name in QUANTIZE_SWITCHES.items():
        if switch in quantize:
            switched[name] = bool(quantize.pop(switch))
            on = switched[name]
            new.append(
                f"{'' if on else 'no '}{name} in export.formats (for "
                f"export.quantize.{switch}={hydra_value(on)})"
            )
    for option, setting in quantize.items():
        entries.setdefault("int8", {})[option] = setting
        new.append(f"export.int8.{option}={hydra_value(setting)}")
    warn_moved("export.quantize", ", ".join(new) or "export.int8.<option>")
    return switched


class QuantizeConfig(dict):
    """The old ``export.quantize`` mapping (its switches and the INT8 options), kept so that
    configs saved in run folders (``_target_: lightning_cls.export.QuantizeConfig``) and code
    passing ``ExportConfig(quantize=QuantizeConfig(...))`` still work: ``ExportConfig`` reads
    it with a deprecation line. The INT8 options are ``export.int8.Int8Options``."""

    def __init__(self, **options: Any):
        super().__init__(options)


def hydra_value(value: Any) -> str:
    """``value`` as a command line writes it (``[trace,script]``)."""
    if isinstance(value, list | tuple):
        return f"[{','.join(hydra_value(v) for v in value)}]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def warn_moved(old: str, new: str) -> None:
    log.warning("%s is deprecated and will be removed; use %s instead (same meaning).", old, new)


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
    INT8 model loses more than ``export.int8.max_acc_drop`` points and ``force`` is off.
    """
    out = Path(out_dir)
    writers = accepted(config.writers(), spec, config)
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
