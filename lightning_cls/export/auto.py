"""``export=auto``: export every runtime available here, time them on this machine, and keep
the fastest one that passes the accuracy gate.

Candidates: every registered format's ``Writer.candidates`` (``export.writer.FORMATS``) whose
packages are installed here (``Writer.available``): TorchScript (traced, the PyTorch
reference), ONNX Runtime fp32 and static INT8 (QDQ and QOperator), and, when
``openvino``/``nncf`` are installed, OpenVINO f32, bf16 (on CPUs that support it) and NNCF
INT8. Each candidate's validation accuracy is compared with eager PyTorch's; one that drops
more than ``max_acc_drop`` points is not eligible. The INT8 candidates are ``export=int8``'s
own writers, gated against eager PyTorch: one that fails the gate is never written. Speed is
measured in interleaved rounds (order rotated each round), each a window of ``window_s``
seconds at ``batch_size``; the score is the median img/s over rounds. The winner is copied to
``model_auto<suffix>`` by its writer's ``copy_tagged``, with every measurement in the file's own
metadata (ONNX ``metadata_props`` / OpenVINO ``rt_info`` key ``auto_selection``; TorchScript
extra file ``auto_selection.json``) and in ``auto_selection.json`` beside it.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from lightning_cls.export.errors import AccuracyDropError
from lightning_cls.export.exporter import ExportConfig
from lightning_cls.export.int8 import Int8Options, Int8Writer
from lightning_cls.export.quantize import QuantizationReport, accuracy_drop_points
from lightning_cls.export.writer import FORMATS, ExportData, Writer, options_of
from lightning_cls.fileio import atomic_write_text
from lightning_cls.inference.network import check_same_data
from lightning_cls.inference.predictor import Predictor
from lightning_cls.inference.spec import InputSpec

log = logging.getLogger(__name__)

SELECTION_KEY = "auto_selection"
SELECTION_FILE = "auto_selection.json"


@dataclass
class AutoConfig:
    """How ``export=auto`` measures: its options, ``export.auto.*`` (``conf/export/auto.yaml``)."""

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


class AutoStep(Writer):
    """``export=auto`` in the pipeline: a step that writes its own folder of candidates."""

    key, file, title = "auto", "auto", "export=auto"
    needs_data = "export=auto checks each runtime's accuracy on the validation split"

    Options = AutoConfig

    def __init__(self, config: ExportConfig | None = None, options: AutoConfig | None = None):
        self.config, self.options, self.data = config, options or AutoConfig(), None

    @classmethod
    def from_options(cls, options, config):
        return [cls(config, options)]  # every candidate is built from the whole config

    def bind(self, files, data):
        self.data = data

    def export(self, net, spec, path, **check):
        datamodule = self.data.datamodule
        return export_auto(net, spec, path, datamodule, self.options, check, self.config).path


def candidates(entries: Mapping[str, Mapping]) -> dict[str, Writer]:
    """Every registered format's ``export=auto`` candidates, where it can run here, each built
    from its own options (``entries``: the export config's ``options``)."""
    found: dict[str, Writer] = {}
    for name in FORMATS:
        writer = FORMATS.get(name)
        offered = {}
        if hasattr(writer, "candidates"):
            offered = writer.candidates(options_of(name, entries))
        if offered and not writer.available():
            log.info("export=auto: %s skipped (needs %s).", name, ", ".join(writer.modules))
            continue
        found.update(offered)
    return found


def export_candidates(
    net: nn.Module,
    spec: InputSpec,
    out: Path,
    writers: dict[str, Writer],
    data: ExportData,
    check_kwargs: dict,
) -> tuple[dict[str, Path], dict[str, QuantizationReport]]:
    """Write each candidate (its sources first) into ``out``: name -> path of those written,
    and name -> report of each INT8 one (a rejected one is reported and never written)."""
    files: dict[str, Path] = {}  # by result key: the sources of the derived candidates
    paths, reports = {}, {}
    for name, writer in writers.items():
        if not set(writer.requires) <= set(files):
            continue  # its source is not here (e.g. no OpenVINO)
        writer.bind(files, data)
        try:
            paths[name] = writer.export(net, spec, out / writer.file, **check_kwargs)
            files.setdefault(writer.key, paths[name])
        except AccuracyDropError as err:
            log.warning("%s", err)
        if getattr(writer, "report", None) is not None:
            reports[name] = writer.report
    return paths, reports


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
    config: ExportConfig | None = None,
) -> AutoResult:
    """Export every candidate into ``out_dir``, measure them, and keep the winner
    (``config``: the other writers' options, e.g. the ONNX opset)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    datamodule.setup("fit")
    # The INT8 candidates calibrate, and every candidate is scored, on this data.
    check_same_data(spec.to_dict(), datamodule.spec, "The model being exported", "this data")
    train, val = datamodule.splits["train"], datamodule.splits["val"]
    threads = cfg.threads or torch.get_num_threads()
    net = net.eval()
    eager = Predictor(net, spec)
    eager_acc = eager.accuracy(val.images, val.labels)
    gate = Int8Options(
        calibration_batches=cfg.calibration_batches,
        calibration_batch_size=cfg.calibration_batch_size,
        max_acc_drop=cfg.max_acc_drop,
        latency_runs=0,
    )
    entries = dict(config.options) if config is not None else {}
    writers = candidates({**entries, Int8Writer.options_entry: vars(gate)})
    data = ExportData(train, val, reference_acc=eager_acc, datamodule=datamodule)
    paths, reports = export_candidates(net, spec, out, writers, data, check_kwargs or {})
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
    path = paths[winner].with_name(f"model_auto{paths[winner].suffix}")
    writers[winner].copy_tagged(paths[winner], path, SELECTION_KEY, json.dumps(selection))
    atomic_write_text(out / SELECTION_FILE, json.dumps(selection, indent=2) + "\n")
    log.info(
        "export=auto: %s wins (%.0f img/s) -> %s", winner, results[winner]["img_s_median"], path
    )
    return AutoResult(winner, path, results)
