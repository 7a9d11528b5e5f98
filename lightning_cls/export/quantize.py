"""INT8 post-training quantization for CPU inference, each with a before/after report.

- Static (the one that speeds up CNNs): ONNX Runtime ``quantize_static``, QDQ format,
  per-channel int8 weights, activations calibrated (min/max) on batches drawn from the
  DataModule's train split.
- Dynamic: ``torch.ao.quantization.quantize_dynamic`` on ``nn.Linear`` only; Conv2d layers
  stay fp32, so on a CNN it shrinks the classifier head and speeds up little.

A report compares validation accuracy, file size and batch-1 latency before and after;
``enforce_max_drop`` refuses (deletes) an artifact that loses more than the allowed points.
The INT8 writers of ``lightning_cls.export.int8`` string these together (through the one export
skeleton) for ``export=int8`` and ``export=auto`` alike.
"""

from __future__ import annotations

import copy
import logging
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
)

from lightning_cls.export.errors import AccuracyDropError
from lightning_cls.fileio import atomic_paths
from lightning_cls.inference.predictor import Predictor
from lightning_cls.inference.spec import InputSpec, Split

log = logging.getLogger(__name__)

ACTIVATION_TYPES = {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8}
# QDQ keeps float ops between QuantizeLinear/DequantizeLinear pairs and lets ORT fuse them;
# QOperator writes QLinearConv/QLinearMatMul directly (fewer nodes, the older format).
QUANT_FORMATS = {"qdq": QuantFormat.QDQ, "qoperator": QuantFormat.QOperator}


def calibration_batches(
    split: Split, spec: InputSpec, num_batches: int = 8, batch_size: int = 32, seed: int = 0
) -> list[np.ndarray]:
    """``num_batches`` seeded random batches of a uint8 split, normalized: what every INT8
    calibrator (ONNX Runtime static, NNCF) sees. Each is float32 (B, C, H, W)."""
    if num_batches < 1 or batch_size < 1:
        raise ValueError(
            f"num_batches and batch_size must be >= 1, got {num_batches}, {batch_size}."
        )
    n = min(len(split), num_batches * batch_size)
    if n == 0:
        raise ValueError("The calibration split is empty; calibrate on the train split.")
    order = torch.randperm(len(split), generator=torch.Generator().manual_seed(seed))[:n]
    return [
        spec.preprocess(split.images[order[i : i + batch_size]]).numpy()  # (B, C, H, W)
        for i in range(0, n, batch_size)
    ]


class SplitCalibrationReader(CalibrationDataReader):
    """Feeds ``calibration_batches`` of a split to ONNX Runtime's calibrator."""

    def __init__(
        self,
        split: Split,
        spec: InputSpec,
        num_batches: int = 8,
        batch_size: int = 32,
        seed: int = 0,
        input_name: str = "input",
    ):
        self.batches = calibration_batches(split, spec, num_batches, batch_size, seed)
        self.input_name = input_name
        self._next = 0

    def get_next(self) -> dict | None:
        if self._next >= len(self.batches):
            return None
        self._next += 1
        return {self.input_name: self.batches[self._next - 1]}

    def rewind(self) -> None:
        self._next = 0


def quantize_onnx_static(
    fp32_path: str | Path,
    int8_path: str | Path,
    reader: CalibrationDataReader,
    per_channel: bool = True,
    activation_type: str = "uint8",
    quant_format: str = "qdq",
    keep_first_conv_float: bool = True,
) -> Path:
    """Write an int8 copy of ``fp32_path`` calibrated on ``reader``; metadata is kept.

    ``keep_first_conv_float``: the graph's first Conv (the stem, which sees the normalized
    pixels) stays float. On airbench (``experiment=cifar10_fast``, whose stem is a fixed
    whitening filter) quantizing it cost most of the accuracy (docs/guides/quantizing.md).
    """
    import onnx
    from onnxruntime.quantization import quantize_static

    from lightning_cls.export.onnx import read_metadata, write_metadata

    if activation_type not in ACTIVATION_TYPES:
        raise ValueError(
            f"Unknown activation_type '{activation_type}'; "
            f"use one of {', '.join(ACTIVATION_TYPES)}."
        )
    if quant_format not in QUANT_FORMATS:
        raise ValueError(
            f"Unknown quant_format '{quant_format}'; use one of {', '.join(QUANT_FORMATS)}."
        )
    int8_path = Path(int8_path)
    granularity = "per-channel" if per_channel else "per-tensor"
    quantization = (
        f"static int8 {quant_format}, {granularity} weights, {activation_type} activations"
        + (", first Conv float" if keep_first_conv_float else "")
    )
    with tempfile.TemporaryDirectory() as tmp, atomic_paths(int8_path) as (tmp_int8,):
        # Shape inference + graph fusion first, as ORT's quantization guide recommends.
        prepared = Path(tmp) / "prepared.onnx"
        _pre_process(fp32_path, prepared)
        excluded = first_conv(prepared) if keep_first_conv_float else []
        quantize_static(
            str(prepared),
            str(tmp_int8),
            reader,
            quant_format=QUANT_FORMATS[quant_format],
            per_channel=per_channel,
            activation_type=ACTIVATION_TYPES[activation_type],
            weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
            nodes_to_exclude=excluded,
        )
        model = onnx.load(str(tmp_int8))
        write_metadata(model, read_metadata(fp32_path), quantization=quantization)
        onnx.save_model(model, str(tmp_int8), save_as_external_data=False)
    log.info("Wrote %s (%s)", int8_path, quantization)
    return int8_path


def first_conv(path: str | Path) -> list[str]:
    """The name of the first ``Conv`` node of the ONNX graph at ``path`` (graph order is
    topological), as a list for ``nodes_to_exclude``; empty without a Conv."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return next(([node.name] for node in graph.node if node.op_type == "Conv"), [])


def quantize_torch_dynamic(net: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``net`` with every ``nn.Linear`` int8 (weights) / dynamic (activations).

    ``torch.ao.quantization`` is deprecated in favour of torchao; it still ships with torch,
    and this keeps the dependency list short. Conv2d is not touched.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=UserWarning, message=r".*quantize_per_tensor.*")
        return torch.ao.quantization.quantize_dynamic(
            copy.deepcopy(net).eval(), {torch.nn.Linear}, dtype=torch.qint8
        )


def accuracy_drop_points(reference: float, accuracy: float) -> float:
    """Accuracy points (0..100 scale) lost against ``reference`` (both 0..1): what the INT8
    gate and ``export=auto``'s eligibility compare with the allowed drop."""
    return 100.0 * (reference - accuracy)


@dataclass
class QuantizationReport:
    method: str
    fp32_path: str
    int8_path: str
    acc_before: float  # top-1 (multi-label: mAP) on the validation split, 0..1
    acc_after: float
    size_before: int  # bytes
    size_after: int
    latency_before_ms: float | None  # median at batch 1 (None: not timed)
    latency_after_ms: float | None
    accepted: bool = True  # False: failed the accuracy gate, no file at int8_path
    error: str = ""  # why it was rejected
    metric: str = "accuracy"  # what acc_before/acc_after measure, or "mAP" (multi-label)

    @property
    def drop_points(self) -> float:
        return accuracy_drop_points(self.acc_before, self.acc_after)

    def to_dict(self) -> dict:
        return {**asdict(self), "drop_points": round(self.drop_points, 3)}

    def summary(self) -> str:
        text = (
            f"{self.method}: val {self.metric} {100 * self.acc_before:.2f}% -> "
            f"{100 * self.acc_after:.2f}% "
            f"(drop {self.drop_points:.2f} points); size {self.size_before / 1e6:.2f} MB -> "
            f"{self.size_after / 1e6:.2f} MB"
        )
        if self.latency_before_ms is not None and self.latency_after_ms is not None:
            text += (
                f"; batch-1 latency {self.latency_before_ms:.3f} ms -> "
                f"{self.latency_after_ms:.3f} ms"
            )
        return text if self.accepted else f"{text}; REJECTED"


def median_latency_ms(
    predictor: Predictor, batch_size: int = 1, runs: int = 50, warmup: int = 5
) -> float:
    """Median wall time (ms) of one ``logits`` call on a fixed batch."""
    x = torch.randn(batch_size, *predictor.spec.input_shape)
    for _ in range(warmup):
        predictor.logits(x)
    times = []
    for _ in range(max(runs, 1)):
        start = time.perf_counter()
        predictor.logits(x)
        times.append(time.perf_counter() - start)
    return 1000.0 * sorted(times)[len(times) // 2]


def artifact_size(path: str | Path) -> int:
    """Bytes of an artifact, its companion files included (OpenVINO's ``.bin``)."""
    path = Path(path)
    extra = path.with_suffix(".bin") if path.suffix == ".xml" else None
    return path.stat().st_size + (extra.stat().st_size if extra and extra.is_file() else 0)


def compare(
    method: str,
    before: Predictor,
    after: Predictor,
    val: Split,
    latency_runs: int = 50,
    reference_acc: float | None = None,
) -> QuantizationReport:
    """Measure ``before`` (fp32) and ``after`` (int8) on the validation split.

    ``reference_acc`` replaces the fp32 file's measured accuracy as the baseline (``export=auto``
    gates every runtime against eager PyTorch); ``latency_runs=0`` skips the latency timing.
    """
    timed = latency_runs > 0
    report = QuantizationReport(
        method=method,
        fp32_path=str(before.path),
        int8_path=str(after.path),
        acc_before=(
            before.accuracy(val.images, val.labels) if reference_acc is None else reference_acc
        ),
        acc_after=after.accuracy(val.images, val.labels),
        size_before=artifact_size(before.path),
        size_after=artifact_size(after.path),
        latency_before_ms=median_latency_ms(before, runs=latency_runs) if timed else None,
        latency_after_ms=median_latency_ms(after, runs=latency_runs) if timed else None,
        metric=before.score_name,
    )
    log.info("%s", report.summary())
    return report


def drop_message(report: QuantizationReport, max_drop_points: float) -> str | None:
    """The gate every INT8 file passes (``export=int8`` and ``export=auto``): None when
    ``report`` lost at most ``max_drop_points`` accuracy points, else why not."""
    if report.drop_points <= max_drop_points:
        return None
    return (
        f"{report.method} lost {report.drop_points:.2f} {report.metric} points on the validation "
        "split "
        f"({100 * report.acc_before:.2f}% -> {100 * report.acc_after:.2f}%), more than the allowed "
        f"{max_drop_points:g}."
    )


def enforce_max_drop(
    report: QuantizationReport,
    max_drop_points: float,
    force: bool = False,
    companions: tuple[str, ...] = (),
) -> None:
    """Raise ``AccuracyDropError`` (and delete the int8 file and its ``companions``, the
    writer's: OpenVINO's ``.bin``) if accuracy fell too far.

    With ``force`` the file is kept and the drop is only logged as a warning.
    """
    message = drop_message(report, max_drop_points)
    if message is None:
        return
    if force:
        log.warning("%s Keeping %s because force is set.", message, report.int8_path)
        return
    path = Path(report.int8_path)
    path.unlink(missing_ok=True)
    for suffix in companions:
        path.with_suffix(suffix).unlink(missing_ok=True)
    raise AccuracyDropError(
        f"{message} Deleted {report.int8_path}. Calibrate on more batches "
        "(export.int8.calibration_batches), raise export.int8.max_acc_drop, or set "
        "export.int8.force=true to keep the file anyway."
    )


def _pre_process(fp32_path: Path, prepared: Path) -> None:
    """ORT's quantization pre-processing. Its symbolic shape inference fails on some graphs
    (airbench's, ``experiment=cifar10_fast``: a TypeError in ``_infer_Reshape`` with ONNX Runtime
    1.32); ONNX's own shape inference and the graph optimization still run without it."""
    from onnxruntime.quantization import quant_pre_process

    try:
        quant_pre_process(str(fp32_path), str(prepared))
    except Exception as err:  # noqa: BLE001 - any failure of that pass: retry without it
        log.info("Symbolic shape inference failed on %s (%r): preprocessing without it",
                 fp32_path.name, err)  # fmt: skip
        quant_pre_process(str(fp32_path), str(prepared), skip_symbolic_shape=True)
