"""``diagnose(datamodule, out_dir)``: every check, in the order a practitioner would look, and
the report (``report.md``, ``report.json``, PNG mosaics; optionally a cleaned index CSV).

Nothing in the data is changed: the DataModule is read as training reads it, and every file
written goes into ``out_dir`` (or ``write_index``) through ``fileio``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from lightning_cls.doctor import duplicates as dup
from lightning_cls.doctor import files as file_checks
from lightning_cls.doctor import labels as label_checks
from lightning_cls.doctor.index import check_indexable, dropped_rows, write_clean_index
from lightning_cls.doctor.mosaics import duplicates_mosaic, flagged_mosaic, label_issues_mosaic
from lightning_cls.doctor.report import write_report
from lightning_cls.doctor.sources import Rows, SplitView, all_rows, read_views
from lightning_cls.threads import available_cores

log = logging.getLogger(__name__)


@dataclass
class DoctorOptions:
    folds: int = 5  # out-of-fold probabilities for the label check
    min_probe_accuracy: float = 0.8  # below it, label findings are shown but not trusted
    features_from: str | None = None  # a .ckpt/model_weights.pt: its embeddings, not pixels
    near_distance: int = 4  # bits of the 64-bit perceptual hash that near duplicates may differ
    size_factor: float = 4.0  # "far smaller/larger": linear size this many times the median's
    imbalance_ratio: float = 3.0  # train max/min class count from which to suggest weights
    label_errors: bool = True
    duplicates: bool = True
    mosaic_limit: int = 32  # most groups/images per mosaic
    write_index: str | None = None  # a cleaned index CSV (file-backed data only)
    drop: tuple[str, ...] = ("duplicates", "label_issues")  # what the cleaned index leaves out
    seed: int = 0

    def check(self) -> None:
        """Refuse a bad setting before any check runs (a bad path must not cost a full scan)."""
        if isinstance(self.folds, bool) or not isinstance(self.folds, int) or self.folds < 2:
            raise ValueError(f"doctor.folds={self.folds!r} must be an integer >= 2 (e.g. 5).")
        if not 0 <= self.near_distance < dup.HASH_BITS // 2:
            dup.near_pairs(np.zeros(0, dtype=np.uint64), self.near_distance)  # its message
        if self.size_factor <= 1:
            raise ValueError(f"doctor.size_factor={self.size_factor} must be > 1 (e.g. 4).")
        dropped_rows({"duplicates": [], "label_issues": []}, self.drop)  # names unknown entries
        if self.features_from is not None and not Path(self.features_from).is_file():
            raise FileNotFoundError(
                f"doctor.features_from={self.features_from} not found; pass a .ckpt or "
                "model_weights.pt file, or null for the pixel probe."
            )


def diagnose(datamodule, out_dir: str | Path, options: DoctorOptions | None = None) -> dict:
    """Run every check on ``datamodule`` and write the report into ``out_dir``; returns it."""
    options = options or DoctorOptions()
    options.check()
    start = time.perf_counter()
    out = Path(out_dir)
    views, unreadable = read_views(datamodule)
    root = getattr(datamodule, "root", None)
    if options.write_index:
        check_indexable(options.write_index, views, datamodule.name, root)
    classes = list(datamodule.classes)
    where = {
        (v.name, r): v.files[r] for v in views.values() if v.files for r in range(len(v.files))
    }
    result: dict = {
        "data": datamodule.name,
        "task": datamodule.task,
        "classes": classes,
        "splits": {name: len(v.images) for name, v in views.items()},
        "options": asdict(options),
        "skipped": {},
    }
    clock = Stopwatch(start)
    clock.lap("read")
    result["files"] = _file_checks(views, unreadable, datamodule, options, result["skipped"])
    clock.lap("files")
    images, owners = all_rows(views)
    if datamodule.num_channels == 3:
        result["files"]["grayscale_content"] = [
            {"split": owners[i][0], "row": owners[i][1], "path": where.get(owners[i])}
            for i in file_checks.gray_content(images).tolist()
        ]
    result["duplicates"] = _duplicates(images, owners, where, options, result["skipped"])
    clock.lap("duplicates")
    result["balance"] = _balance(views, classes, datamodule.task, options)
    result["label_issues"] = _label_issues(
        images, owners, views, classes, datamodule.task, options, result
    )
    clock.lap("labels")
    if options.write_index:
        index = options.write_index
        result["index"] = write_clean_index(index, views, classes, result, options.drop, root)
    result["seconds"], result["timings"] = round(time.perf_counter() - start, 3), clock.laps
    image_of = lambda split, row: np.asarray(views[split].images[row])  # noqa: E731
    result["mosaics"] = _mosaics(result, image_of, classes, out, options.mosaic_limit, where)
    write_report(result, out)
    return result


def _file_checks(views, unreadable, datamodule, options, skipped) -> dict:
    if any(v.files is None for v in views.values()):
        skipped["files"] = (
            f"data={datamodule.name} is held in memory, not read from image files: unreadable, "
            "truncated and empty files, file sizes, grayscale/CMYK file modes and EXIF "
            "orientation were not checked (the grayscale-content check ran on the pixels)"
        )
        return {}
    paths = [f for v in views.values() for f in v.files] + list(unreadable)
    facts = file_checks.inspect_files(paths, workers=available_cores())
    return {"checked": len(facts)} | file_checks.file_findings(
        facts, datamodule.num_channels, options.size_factor
    )


def _duplicates(images, owners, where, options, skipped) -> list[dict]:
    if not options.duplicates:
        skipped["duplicates"] = "doctor.duplicates=false"
        return []
    exact, perceptual = dup.image_hashes(images)
    groups = dup.duplicate_groups(owners, exact, perceptual, options.near_distance)
    for group in groups:
        group["files"] = [where.get(tuple(m)) for m in group["members"]]
    return groups


def _balance(views: dict[str, SplitView], classes, task: str, options) -> dict:
    k = len(classes)
    if task == "multiclass":
        counts = {n: torch.bincount(v.labels.long(), minlength=k)[:k] for n, v in views.items()}
    else:  # multi-hot rows: positives per label
        counts = {n: v.labels.sum(0).round().long() for n, v in views.items()}
    counts = {n: c.tolist() for n, c in counts.items()}
    return label_checks.class_balance(counts, classes, options.imbalance_ratio, task)


def _label_issues(images, owners, views, classes, task, options, result) -> list[dict]:
    skipped = result["skipped"]
    if not options.label_errors:
        skipped["label_issues"] = "doctor.label_errors=false"
        return []
    if task != "multiclass":
        skipped["label_issues"] = (
            f"task={task}: the out-of-fold probe ranks one label per image (multi-class only)"
        )
        return []
    labels = torch.cat([v.labels for v in views.values()]).numpy()
    probs = label_checks.out_of_fold_probs(
        _features(images, options.features_from), labels, len(classes), options.folds, options.seed
    )
    issues = label_checks.label_issues(labels, probs)
    for issue in issues:
        issue["split"], issue["row"] = owners[issue["row"]]
    accuracy = round(float((probs.argmax(1) == labels).mean()), 4)
    result["label_probe"] = {
        "out_of_fold_accuracy": accuracy,
        "folds": options.folds,
        "reliable": accuracy >= options.min_probe_accuracy,
        "features": options.features_from or "pixels",
    }
    log.info("Out-of-fold probe accuracy %.3f; %d likely label errors.", accuracy, len(issues))
    return issues


def _features(images: Rows, features_from: str | None) -> torch.Tensor:
    if features_from is None:
        return label_checks.probe_features(images)
    from lightning_cls.inference.torch_models import load_torch_model

    net, spec = load_torch_model(features_from)
    where = f"doctor.features_from={features_from}"
    return label_checks.network_features(net.eval(), spec, images, where)


def _mosaics(result, image_of, classes, out: Path, limit: int, where) -> dict[str, str]:
    def caption(split, row):
        return f"{split}:{row}" + (f"\n{Path(where[(split, row)]).name}" if where else "")

    drawn = {
        "duplicates": duplicates_mosaic(
            result["duplicates"], image_of, caption, out / "duplicates.png", limit
        ),
        "label_issues": label_issues_mosaic(
            result["label_issues"], image_of, classes, out / "label_issues.png", limit
        ),
    }
    flagged = [
        ("gray", r["split"], r["row"], "") for r in result["files"].get("grayscale_content", [])
    ]
    drawn["flagged"] = flagged_mosaic(flagged, image_of, out / "flagged.png", limit)
    return {name: path.name for name, path in drawn.items() if path is not None}


class Stopwatch:
    """Seconds per stage (``laps``), for the report and the benchmark."""

    def __init__(self, start: float):
        self.last, self.laps = start, {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self.last, 3)
        self.last = now
