"""The one INT8 path of ``export=int8`` and ``export=auto``: calibrate, measure, gate, keep.

``int8_writer`` makes the file (ONNX Runtime static QDQ/QOperator and NNCF calibrate on the
same seeded ``calibration_batches`` of the train split; torch dynamic needs no calibration).
``quantize_gated`` writes it under a temp name, measures it on the validation split against
its fp32 file (``compare``), applies the accuracy gate (``enforce_max_drop``), and only then
renames it to its final name. A rejected INT8 leaves nothing at that name (an older file
there, made from another fp32 model, is removed too); a kill leaves at most a hidden temp.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from torch import nn

from lightning_cls.export.errors import AccuracyDropError
from lightning_cls.export.quantize import (
    QuantizationReport,
    SplitCalibrationReader,
    compare,
    enforce_max_drop,
    quantize_onnx_static,
    quantize_torch_dynamic,
)
from lightning_cls.fileio import atomic_paths
from lightning_cls.inference.predictor import load_artifact
from lightning_cls.inference.spec import InputSpec, Split

log = logging.getLogger(__name__)

# method -> the file ``export=int8`` writes it to, next to its fp32 source
METHODS = {
    "onnx_static_int8": "model_int8.onnx",  # ONNX Runtime static (fp32: model.onnx)
    "torch_dynamic_int8": "model_int8_dynamic.torchscript",  # torch.ao dynamic, nn.Linear only
    "openvino_nncf_int8": "model_int8.xml",  # NNCF post-training (fp32: model.xml)
}


def int8_writer(
    method: str,
    fp32_path: Path,
    spec: InputSpec,
    train: Split | None = None,
    net: nn.Module | None = None,
    calibration_batches: int = 8,
    calibration_batch_size: int = 32,
    per_channel: bool = True,
    activation_type: str = "uint8",
    quant_format: str = "qdq",
    check_kwargs: dict | None = None,
) -> Callable[[Path], Path]:
    """A function that writes ``method``'s INT8 model of ``fp32_path`` at the path it is given."""
    if method not in METHODS:
        raise ValueError(f"Unknown INT8 method '{method}'; use one of {', '.join(METHODS)}.")
    if method == "torch_dynamic_int8":
        from lightning_cls.export.torchscript import export_torchscript

        if net is None:
            raise ValueError("torch_dynamic_int8 quantizes the eager network; pass net=.")
        return lambda dst: export_torchscript(
            quantize_torch_dynamic(net), spec, dst, "trace", **(check_kwargs or {})
        )
    if train is None:
        raise ValueError(f"{method} calibrates on the train split; pass train=.")
    if method == "openvino_nncf_int8":
        from lightning_cls.export.openvino import quantize_openvino_int8

        return lambda dst: quantize_openvino_int8(
            fp32_path, dst, train, spec, calibration_batches, calibration_batch_size
        )
    return lambda dst: quantize_onnx_static(
        fp32_path,
        dst,
        SplitCalibrationReader(train, spec, calibration_batches, calibration_batch_size),
        per_channel,
        activation_type,
        quant_format,
    )


def quantize_gated(
    method: str,
    fp32_path: str | Path,
    int8_path: str | Path,
    write: Callable[[Path], Path],
    val: Split,
    max_acc_drop: float = 1.0,
    force: bool = False,
    latency_runs: int = 50,
    reference_acc: float | None = None,
) -> QuantizationReport:
    """Write (``write``), measure and gate one INT8 model; keep it at ``int8_path`` only if it
    passes (or ``force``). ``report.accepted``/``report.error`` say what happened.

    ``reference_acc``: the baseline accuracy (default: the fp32 file's own on ``val``).
    """
    int8_path = Path(int8_path)
    files = (
        [int8_path.with_suffix(".bin"), int8_path] if int8_path.suffix == ".xml" else [int8_path]
    )
    try:
        with atomic_paths(*files) as temps:
            write(temps[-1])
            # Our own files, just written: TorchScript is trusted here.
            before = load_artifact(fp32_path, trust_artifact=True)
            after = load_artifact(temps[-1], trust_artifact=True)
            report = compare(method, before, after, val, latency_runs, reference_acc)
            report.int8_path = str(int8_path)
            enforce_max_drop(report, max_acc_drop, force)  # removes an older int8_path too
    except AccuracyDropError as err:
        report.accepted, report.error = False, str(err)
        log.warning("%s", err)
        return report
    log.info("Kept %s", int8_path)
    return report
