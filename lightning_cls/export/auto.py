"""``export=auto``: export every runtime available here, time them on this machine, and keep
the fastest one that passes the accuracy gate.

Candidates: TorchScript (traced, the PyTorch reference), ONNX Runtime fp32 and static INT8
(QDQ and QOperator), and, when ``openvino``/``nncf`` are installed, OpenVINO f32, bf16 (on
CPUs that support it) and NNCF INT8. Each candidate's validation accuracy is compared with
eager PyTorch's; one that drops more than ``max_acc_drop`` points is not eligible. The INT8
candidates are ``export=int8``'s own writers (``export.int8``) through the one skeleton
(``export.writer.write_checked``): one that fails the gate is never written. Speed is
measured in interleaved rounds (order rotated each round), each a window of ``window_s``
seconds at ``batch_size``; the score is the median img/s over rounds. The winner is copied to
``model_auto<suffix>`` with every measurement in its metadata (ONNX ``metadata_props`` /
OpenVINO ``rt_info`` key ``auto_selection``; TorchScript extra file ``auto_selection.json``)
and in ``auto_selection.json`` beside it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from lightning_cls.export import int8
from lightning_cls.export.errors import AccuracyDropError
from lightning_cls.export.quantize import QuantizationReport, accuracy_drop_points
from lightning_cls.export.writer import write_checked
from lightning_cls.fileio import atomic_path, atomic_write_text
from lightning_cls.inference.network import check_same_data
from lightning_cls.inference.predictor import Predictor
from lightning_cls.inference.spec import InputSpec

log = logging.getLogger(__name__)

SELECTION_KEY = "auto_selection"
SELECTION_FILE = "auto_selection.json"


@dataclass
class AutoConfig:
    """How ``export=auto`` measures (``conf/export/auto.yaml``)."""

    batch_size: int = 64
    rounds: int = 5
    window_s: float = 1.0  # seconds timed per candidate per round
    threads: int | None = None  # intra-op threads for every runtime (None: all cores)
    max_acc_drop: float = 1.0  # accuracy points below eager PyTorch on the validation split
    calibration_batches: int = 8
    calibration_batch_size: int = 32

    def __post_init__(self):
        if self.batch_size < 1 or self.rounds < 1 or self.window_s <= 0:
            raise ValueError(
                "export.auto needs batch_size >= 1, rounds >= 1 and window_s > 0; got "
                f"batch_size={self.batch_size}, rounds={self.rounds}, window_s={self.window_s}."
            )


@dataclass
class AutoResult:
    winner: str
    path: Path
    measurements: dict = field(default_factory=dict)  # candidate -> {val_acc, img_s, ...}


def openvino_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("openvino", "nncf"))


def export_candidates(
    net: nn.Module, spec: InputSpec, out: Path, check_kwargs: dict
) -> dict[str, Path]:
    """Write every fp32 candidate into ``out``; name -> path (ONNX is always first)."""
    from lightning_cls.export.onnx import export_onnx
    from lightning_cls.export.torchscript import export_torchscript

    onnx = export_onnx(net, spec, out / "model.onnx", **check_kwargs)
    paths = {
        "torchscript": export_torchscript(
            net, spec, out / "model_trace.torchscript", "trace", **check_kwargs
        ),
        "ort_fp32": onnx,
    }
    if not openvino_available():
        log.info("openvino/nncf not installed: OpenVINO candidates skipped (extra 'openvino').")
        return paths
    from lightning_cls.export.openvino import export_openvino

    paths["ov_f32"] = export_openvino(onnx, out / "model.xml", spec, net, **check_kwargs)
    if torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported():
        paths["ov_bf16"] = export_openvino(onnx, out / "model_bf16.xml", spec, precision="bf16")
    return paths


def int8_candidates(
    paths: dict[str, Path], spec: InputSpec, out: Path, splits, cfg: AutoConfig, eager_acc
) -> dict[str, QuantizationReport]:
    """Each INT8 candidate through ``export=int8``'s own writers and gate (calibrate, measure
    against eager PyTorch, rename only if it passes); one that fails is reported, never
    written."""
    gate = int8.Gate(cfg.max_acc_drop, force=False, latency_runs=0, reference_acc=eager_acc)
    calibration = int8.Calibration(cfg.calibration_batches, cfg.calibration_batch_size)
    candidates = {}  # name -> writer, for the fp32 candidates written
    if "ort_fp32" in paths:
        for name, layout, file in (
            ("ort_int8_qdq", "qdq", "model_int8.onnx"),
            ("ort_int8_qoperator", "qoperator", "model_int8_qop.onnx"),
        ):
            candidates[name] = int8.OnnxStaticInt8Writer(
                paths["ort_fp32"], gate, calibration, name, file, quant_format=layout
            )
    if "ov_f32" in paths:
        candidates["ov_int8"] = int8.OpenVINOInt8Writer(
            paths["ov_f32"], gate, calibration, "ov_int8"
        )
    reports = {}
    for name, writer in candidates.items():
        try:
            reports[name] = write_checked(writer, None, spec, out / writer.file, data=splits).report
        except AccuracyDropError as err:
            log.warning("%s", err)
            reports[name] = err.report
    return reports


def _load(path: Path, threads: int | None) -> Callable[[torch.Tensor], torch.Tensor]:
    """The inference runtime for ``path`` (the one ``predict`` and the server would use)."""
    from lightning_cls.inference.runtimes import open_runtime

    return open_runtime(path, trust_artifact=True, threads=threads)  # files this run wrote


def measure(fns: dict[str, Callable], spec: InputSpec, val, cfg: AutoConfig) -> dict:
    """Validation accuracy and interleaved img/s rounds for each candidate."""
    results: dict[str, dict] = {}
    for name, fn in fns.items():  # accuracy as the INT8 gate measures it (the spec's TTA)
        results[name] = {"val_acc": Predictor(fn, spec).accuracy(val.images, val.labels)}
        results[name]["img_s"] = []
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (cfg.batch_size, *spec.input_shape), generator=g)
    x = spec.preprocess(images.to(torch.uint8))
    order = list(fns)
    for r in range(cfg.rounds):
        for name in order[r % len(order) :] + order[: r % len(order)]:
            results[name]["img_s"].append(_throughput(fns[name], x, cfg.window_s))
    for entry in results.values():
        entry["img_s_median"] = statistics.median(entry["img_s"])
    return results


def _throughput(fn, x: torch.Tensor, seconds: float) -> float:
    with torch.inference_mode():
        fn(x)  # warm-up: first-call allocations and lazy compilation
        calls, start = 0, time.perf_counter()
        while calls < 3 or time.perf_counter() - start < seconds:
            fn(x)
            calls += 1
    return calls * len(x) / (time.perf_counter() - start)


def select(
    results: dict, eager_acc: float, max_acc_drop: float, score_name: str = "accuracy"
) -> str:
    """The fastest candidate whose accuracy drop (points below eager) is within the gate;
    ``score_name``: what the scores are ("accuracy", or "mAP" for a multi-label model)."""
    for entry in results.values():
        entry["acc_drop_points"] = accuracy_drop_points(eager_acc, entry["val_acc"])
        entry["eligible"] = entry["acc_drop_points"] <= max_acc_drop and not entry.get("rejected")
    eligible = [n for n, e in results.items() if e["eligible"]]
    if not eligible:
        accs = ", ".join(f"{n} {100 * e['val_acc']:.2f}%" for n, e in results.items())
        raise ValueError(
            f"No exported runtime kept {score_name} within {max_acc_drop:g} points of eager "
            "PyTorch "
            f"({100 * eager_acc:.2f}%): {accs}. Raise export.auto.max_acc_drop or check the "
            "calibration data."
        )
    return max(eligible, key=lambda n: results[n]["img_s_median"])


def export_auto(
    net: nn.Module,
    spec: InputSpec,
    out_dir: str | Path,
    datamodule,
    cfg: AutoConfig,
    check_kwargs: dict | None = None,
) -> AutoResult:
    """Export every candidate into ``out_dir``, measure them, and keep the winner."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    datamodule.setup("fit")
    # The INT8 candidates calibrate, and every candidate is scored, on this data.
    check_same_data(spec.to_dict(), datamodule.spec, "The model being exported", "this data")
    val = datamodule.splits["val"]
    threads = cfg.threads or torch.get_num_threads()
    net = net.eval()
    eager = Predictor(net, spec)
    eager_acc = eager.accuracy(val.images, val.labels)
    paths = export_candidates(net, spec, out, check_kwargs or {})
    reports = int8_candidates(paths, spec, out, datamodule.splits, cfg, eager_acc)
    paths.update({n: Path(r.int8_path) for n, r in reports.items() if r.accepted})
    fns = {name: _load(path, threads) for name, path in paths.items()}
    results = measure(fns, spec, val, cfg)
    for name, report in reports.items():
        if not report.accepted:  # failed the gate: measured for accuracy only, not on disk
            results[name] = {"val_acc": report.acc_after, "img_s": [], "rejected": report.error}
    winner = select(results, eager_acc, cfg.max_acc_drop, eager.score_name)
    selection = {
        "winner": winner,
        "file": paths[winner].name,
        "metric": f"median img/s at batch {cfg.batch_size} over {cfg.rounds} interleaved "
        f"rounds of {cfg.window_s:g} s, {threads} intra-op threads",
        "eager_val_acc": eager_acc,
        "score": eager.score_name,  # what every val_acc here is: accuracy, or mAP (multi-label)
        "max_acc_drop": cfg.max_acc_drop,
        "candidates": results,
    }
    path = write_winner(paths[winner], selection)
    atomic_write_text(out / SELECTION_FILE, json.dumps(selection, indent=2) + "\n")
    log.info(
        "export=auto: %s wins (%.0f img/s) -> %s", winner, results[winner]["img_s_median"], path
    )
    return AutoResult(winner, path, results)


def write_winner(src: Path, selection: dict) -> Path:
    """Copy ``src`` to ``model_auto<suffix>`` with ``selection`` in the file's own metadata."""
    dst = src.with_name(f"model_auto{src.suffix}")
    text = json.dumps(selection)
    if src.suffix == ".onnx":
        import onnx

        model = onnx.load(str(src))
        entry = model.metadata_props.add()
        entry.key, entry.value = SELECTION_KEY, text
        with atomic_path(dst) as tmp:
            onnx.save_model(model, str(tmp), save_as_external_data=False)
    elif src.suffix == ".xml":
        import openvino as ov

        from lightning_cls.export.openvino import _save

        model = ov.Core().read_model(str(src))
        model.set_rt_info(text, ["lightning_cls", SELECTION_KEY])
        _save(model, dst)  # .xml and .bin land together
    else:  # TorchScript: add an extra file next to meta.json
        from lightning_cls.inference.spec import META_FILE

        extra = {META_FILE: ""}
        module = torch.jit.load(str(src), _extra_files=extra)
        extra[SELECTION_FILE] = text
        with atomic_path(dst) as tmp:
            torch.jit.save(module, str(tmp), _extra_files=extra)
    return dst
