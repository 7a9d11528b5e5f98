"""The open-set report of ``eval ood.near=DIR ood.far=[DIR,...]``: known images against
folders of unknown ones, for any artifact ``load_artifact`` reads (.ckpt, .onnx, ...).

The known split's confidence (the model's rejection score, else the top-1 probability) and
right/wrong answers are computed once; each folder's images are scored the same way, and
``inference.open_set`` turns the two into AUROC, FPR95, AUPR, OSCR, AURC and the share of
unknowns the deployed threshold would answer. No Lightning, no Hydra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lightning_cls.inference import open_set
from lightning_cls.inference.predictor import Predictor
from lightning_cls.inference.rules.msp import MSP
from lightning_cls.inference.spec import Split
from lightning_cls.inference.tasks import Task
from lightning_cls.inference.trust import check_score

OOD_KINDS = ("near", "far")  # unknown classes like the known ones; unlike anything trained on


def ood_sets(ood: Any) -> list[tuple[str, Path]]:
    """``eval``'s ``ood`` as (kind, folder) pairs: ``{near: DIR or [DIR, ...], far: ...}``;
    a bare folder (``ood=DIR``, the older form) is short for ``ood.far=DIR``."""
    if ood is None:
        return []
    if isinstance(ood, (str, Path)):
        ood = {"far": ood}
    if not isinstance(ood, Mapping) or set(ood) - set(OOD_KINDS):
        raise ValueError(
            f"ood={ood!r} is not a set of unknown-image folders; use ood.near=DIR and/or "
            "ood.far=DIR or ood.far=[DIR,...] (near: unseen classes like the known ones; far: "
            "anything else)."
        )
    pairs = []
    for kind in OOD_KINDS:
        folders = ood.get(kind) or []
        for folder in [folders] if isinstance(folders, (str, Path)) else folders:
            pairs.append((kind, Path(str(folder))))
    return pairs


@dataclass
class OpenSetScores:
    """What the open-set report measured: ``report`` (per folder name its metrics, what
    ``results.json`` keeps) and the scores its figures are drawn from (``figures.open_set``):
    the known images' confidence (N,) and right answers (N,) bool, each folder's confidence,
    the score's name and the deployed threshold (None: no rule for it)."""

    report: dict[str, dict[str, Any]]
    inside: np.ndarray
    correct: np.ndarray
    unknown: dict[str, np.ndarray]
    score: str
    threshold: float | None


def ood_report(
    ckpt_path: str | Path,
    known: Split,
    sets: Sequence[tuple[str, str | Path]],
    score: str | None = None,
) -> dict[str, dict[str, Any]]:
    """The open-set report (``open_set_scores``' ``report``), without figures."""
    return open_set_scores(ckpt_path, known, sets, score).report


def open_set_scores(
    ckpt_path: str | Path,
    known: Split,
    sets: Sequence[tuple[str, str | Path]],
    score: str | None = None,
) -> OpenSetScores:
    """The open-set report: how well the model's confidence separates the ``known`` split's
    images from each folder of unknown images in ``sets`` ((kind, folder) pairs, kind
    ``near`` | ``far``), keyed by folder name: AUROC, FPR95, AUPR (unknowns positive), OSCR,
    AURC (``inference.open_set``) and, at the model's rejection threshold, the share of
    unknown images answered with a label (``false_accept_rate``) and of known images kept
    (``None`` with a ``threshold_note`` where the model has no rule for this score).
    ``ckpt_path``: any artifact ``load_artifact`` reads (.ckpt, .onnx, ...). ``score``:
    ``msp`` | ``energy`` | the checkpoint's feature-space rule (``knn``, ``mahalanobis``);
    default the rule's, else ``msp``. ``figures.open_set.write_ood_figures`` draws
    ``ood_risk_coverage.png`` and one ``ood_scores_<name>.png`` per set from the result."""
    from lightning_cls.inference.predictor import load_artifact

    named = _named_sets(sets)
    predictor = load_artifact(ckpt_path)
    spec, task = predictor.spec, predictor.task
    score = check_score(score or (spec.decision.reject or {}).get("score") or MSP)
    logits, features = predictor.image_outputs(known.images)  # features: a feature-space rule
    inside = task.confidence(logits, score, features).float().numpy()  # (N,)
    correct = correct_answers(task, logits, known.labels)  # (N,) bool
    threshold, note = _deployed_threshold(spec.decision.reject, score)
    report, unknown = {}, {}
    for name, (kind, folder) in named.items():
        outside, counts = _folder_confidence(predictor, folder, score)  # (M,)
        unknown[name] = outside
        metrics = _metrics(inside, correct, outside, threshold, note)
        report[name] = {"kind": kind, "folder": str(folder), "score": score,
                        "known_images": len(inside), **counts, **metrics}  # fmt: skip
    return OpenSetScores(report, inside, correct, unknown, score, threshold)


def _named_sets(sets: Sequence[tuple[str, str | Path]]) -> dict[str, tuple[str, Path]]:
    named: dict[str, tuple[str, Path]] = {}
    for kind, folder in sets:
        folder = Path(folder)
        if not folder.is_dir():
            raise FileNotFoundError(
                f"ood.{kind}={folder}: no such folder; put images of classes the model never "
                "saw there (searched recursively), or drop the key."
            )
        name = folder.name if folder.name not in ("", "..") else folder.resolve().name
        if name in named:
            raise ValueError(
                f"ood.{kind}={folder} and ood.{named[name][0]}={named[name][1]} share the name "
                f"{name!r} that results.json keys them by; rename one of the folders."
            )
        named[name] = (kind, folder)
    return named


def _folder_confidence(predictor: Predictor, folder: Path, score: str):
    from lightning_cls.inference.images import find_images, load_image_batch

    spec = predictor.spec
    files = find_images([folder])
    odd, _, failed = load_image_batch(files, spec.image_size, spec.num_channels, spec.resize_size)
    if len(odd) == 0:
        raise ValueError(
            f"{folder}: none of its {len(files)} files could be read as an image; put images "
            "(png, jpg, ...) of classes the model never saw there."
        )
    logits, features = predictor.image_outputs(torch.from_numpy(odd))
    outside = predictor.task.confidence(logits, score, features).float().numpy()
    return outside, {"ood_images": len(outside), "unreadable": len(failed)}


def correct_answers(task: Task, logits: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
    """(N,) whether each image's answer is right (multi-label: every label right)."""
    same = task.predicted(task.probabilities(logits)).float() == labels.float()
    return same.reshape(len(same), -1).all(1).numpy()


def _deployed_threshold(reject: dict | None, score: str) -> tuple[float | None, str | None]:
    if reject is None:
        return None, "the model has no rejection rule; calibrate reject=<score> sets one"
    if reject["score"] != score:
        return None, f"the model's rule thresholds {reject['score']}, not ood_score={score}"
    return float(reject["threshold"]), None


def _metrics(inside, correct, outside, threshold, note) -> dict[str, Any]:
    def r(value: float) -> float:
        return round(float(value), 6)

    metrics = {
        "known_accuracy": r(correct.mean()),
        "auroc": r(open_set.auroc(inside, outside)),
        "fpr95": r(open_set.fpr_at_tpr(inside, outside, 0.95)),
        "aupr": r(open_set.aupr_unknown(inside, outside)),
        "oscr": r(open_set.oscr(inside, correct, outside)),
        "aurc": r(open_set.aurc(inside, correct)),
        "threshold": threshold,
        "false_accept_rate": None,
        "known_kept": None,
    }
    if threshold is None:
        return {**metrics, "threshold_note": note}
    metrics["false_accept_rate"] = r(open_set.accepted_share(outside, threshold))
    metrics["known_kept"] = r((inside >= threshold).mean())
    return metrics
