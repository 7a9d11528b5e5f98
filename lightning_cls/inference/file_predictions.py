"""Image files in, predictions out: ``predict_files`` classifies files in batches with a
``Predictor`` (the task decides the labels, the rejection rule and prediction sets), and
``write_predictions_csv`` writes them in the columns of the artifact's task, atomically.
``python -m lightning_cls.predict`` is these two calls.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_cls.fileio import atomic_path
from lightning_cls.inference import arrays
from lightning_cls.inference.images import check_batch_size, load_image_batch
from lightning_cls.inference.tasks import create_task

if TYPE_CHECKING:
    import torch

    from lightning_cls.inference.predictor import Predictor
    from lightning_cls.inference.spec import InputSpec


def predict_files(
    predictor: Predictor, files: Sequence[str | Path], batch_size: int = 64, top_k: int = 5
) -> tuple[list[dict], list[tuple[Path, str]]]:
    """Classify image files in batches.

    Returns ``rows`` ({"file", "labels", "probs"} per readable image, as the task decides:
    top-k first; for a multi-label model every label at or above ``spec.decision.threshold``, most
    probable first, and ``"all_probs"``, one per class; with a rejection rule also
    ``"unknown"`` and ``"score"``; with a prediction-set rule ``"set"``, its labels) and
    ``failures`` ([(path, reason)] for every file that could not be read as an image), the
    shapes ``write_predictions_csv`` takes.
    """
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}.")
    check_batch_size(batch_size)
    spec, task = predictor.spec, predictor.task
    columns = task.rows()
    rows: list[dict] = []
    failures: list[tuple[Path, str]] = []
    paths = [Path(f) for f in files]
    for start in range(0, len(paths), batch_size):
        images, ok, bad = load_image_batch(
            paths[start : start + batch_size], spec.image_size, spec.num_channels, spec.resize_size
        )
        failures += bad
        if not ok:
            continue
        logits, features = predictor.image_outputs(images, batch_size)  # (B, K), (B, D) | None
        probs = task.probabilities(logits)  # (B, K), after the model's temperature
        indices, values = task.decide(probs, top_k)
        verdicts = task.verdicts(logits, features) or [None] * len(ok)  # the rule, if any
        sets = task.sets(probs) or [None] * len(ok)  # prediction sets, if fitted
        for path, idx, p, row, verdict, members in zip(
            ok, indices, values, probs.tolist(), verdicts, sets
        ):
            answer = {"file": str(path), **columns.row(idx, p, row, spec.classes)}
            named = None if members is None else [spec.classes[i] for i in members]
            rows.append(columns.judged(answer, verdict, named))
    return rows, failures


def top_k_labels(spec: InputSpec, probs: torch.Tensor, k: int) -> list[list[dict[str, Any]]]:
    """Probabilities (B, classes) -> per row the ``k`` best ``{"label", "prob"}``, best first."""
    indices, values = arrays.top_k(probs, k)
    return [
        [{"label": spec.classes[i], "prob": p} for p, i in zip(ps, idx)]
        for ps, idx in zip(values, indices)
    ]


def write_predictions_csv(
    output: str | Path,
    rows: list[dict],
    failures: list[tuple[Path, str]],
    top_k: int,
    spec: InputSpec | None = None,
) -> None:
    """One row per file, in the columns of ``spec``'s task (none: multi-class): file,
    label_1..k, prob_1..k, error (empty unless it failed); for a multi-label model file, labels
    (the predicted ones joined by ``;``, the format a multi-label index reads), one
    ``prob_<class>`` column per class, error.
    Written to a temp file renamed over ``output``: an earlier CSV is never left half-written.
    """
    columns = (spec.decision if spec is not None else create_task()).rows()
    classes = spec.classes if spec is not None else ()
    with atomic_path(output) as tmp, tmp.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns.csv_header(classes, top_k))
        for row in rows:
            writer.writerow(columns.csv_row(row, top_k))
        for path, reason in failures:
            writer.writerow(columns.csv_failure(str(path), reason, classes, top_k))
