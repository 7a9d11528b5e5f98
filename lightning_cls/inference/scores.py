"""Multi-label scores on (N, K) probabilities and (N, K) multi-hot targets.

Average precision and AUROC come from torchmetrics, per label; a label without a positive
(or, for AUROC, without a negative) in the split has no defined score and is left out of the
means (NaN in the per-label lists) instead of counting as 0, which would pull mAP down for
a label the split happens not to contain. F1 is computed at a decision threshold;
``best_threshold`` picks the one that maximizes micro-F1 on a grid (done on the validation
split, never on test).
"""

from __future__ import annotations

import warnings

import torch

# Candidate decision thresholds: 0.05, 0.10, ..., 0.95.
THRESHOLD_GRID = tuple(round(0.05 * i, 2) for i in range(1, 20))


def _checked(probs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if probs.ndim != 2 or probs.shape != targets.shape:
        raise ValueError(
            f"Multi-label scores need probabilities and multi-hot targets of the same shape "
            f"(N, labels), got {tuple(probs.shape)} and {tuple(targets.shape)}."
        )
    return probs.float().cpu(), targets.round().int().cpu()


def average_precision_per_label(probs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(K,) average precision per label; NaN for a label with no positive example."""
    from torchmetrics.functional.classification import multilabel_average_precision

    probs, targets = _checked(probs, targets)
    with warnings.catch_warnings():  # "no positive samples": handled below
        warnings.simplefilter("ignore")
        ap = multilabel_average_precision(probs, targets, probs.shape[1], average=None)
    return torch.where(targets.sum(0) > 0, ap.float(), torch.nan)


def auroc_per_label(probs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(K,) ROC AUC per label; NaN for a label whose examples are all positive or all negative."""
    from torchmetrics.functional.classification import multilabel_auroc

    probs, targets = _checked(probs, targets)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auc = multilabel_auroc(probs, targets, probs.shape[1], average=None)
    positives = targets.sum(0)
    defined = (positives > 0) & (positives < len(targets))
    return torch.where(defined, auc.float(), torch.nan)


def mean_average_precision(probs: torch.Tensor, targets: torch.Tensor) -> float:
    """mAP: the mean of the per-label average precisions over labels with a positive."""
    ap = average_precision_per_label(probs, targets)
    return _nanmean(ap)


def _nanmean(values: torch.Tensor) -> float:
    defined = values[~values.isnan()]
    return float(defined.mean()) if len(defined) else float("nan")


def f1_at(
    probs: torch.Tensor, targets: torch.Tensor, threshold: float
) -> tuple[float, float, torch.Tensor]:
    """(micro-F1, macro-F1, per-label F1 (K,)) of predicting every label with probability
    >= ``threshold``. A label never true nor predicted has no F1 (NaN) and is left out of the
    macro mean, as a label without positives is left out of mAP."""
    probs, targets = _checked(probs, targets)
    predicted = probs >= threshold
    truth = targets.bool()
    tp = (predicted & truth).sum(0).float()
    fp = (predicted & ~truth).sum(0).float()
    fn = (~predicted & truth).sum(0).float()
    seen = tp + fp + fn > 0
    per_label = torch.where(seen, 2 * tp / (2 * tp + fp + fn).clamp(min=1), torch.nan)
    denom = 2 * tp.sum() + fp.sum() + fn.sum()
    micro = float(2 * tp.sum() / denom) if denom > 0 else float("nan")
    return micro, _nanmean(per_label), per_label


def best_threshold(
    probs: torch.Tensor, targets: torch.Tensor, grid: tuple[float, ...] = THRESHOLD_GRID
) -> float:
    """The grid threshold with the highest micro-F1 (the lowest such one on ties)."""
    scores = [f1_at(probs, targets, t)[0] for t in grid]
    scores = [-1.0 if s != s else s for s in scores]  # NaN: nothing true and nothing predicted
    return grid[max(range(len(grid)), key=lambda i: (scores[i], -i))]


def multilabel_report(
    probs: torch.Tensor, targets: torch.Tensor, threshold: float
) -> dict[str, float]:
    """The epoch metrics a multi-label run logs: map, auroc (macro over defined labels),
    f1_micro and f1_macro at ``threshold``."""
    micro, macro, _ = f1_at(probs, targets, threshold)
    return {
        "map": mean_average_precision(probs, targets),
        "auroc": _nanmean(auroc_per_label(probs, targets)),
        "f1_micro": micro,
        "f1_macro": macro,
    }


def per_label_report(
    probs: torch.Tensor, targets: torch.Tensor, threshold: float, names: list[str]
) -> dict[str, dict[str, float | int | None]]:
    """Per label: average precision, AUROC, F1 at ``threshold`` and the positive count
    (what ``results.json`` keeps as ``per_class_test``). Undefined scores are ``None``."""
    ap = average_precision_per_label(probs, targets)
    auc = auroc_per_label(probs, targets)
    _, _, f1 = f1_at(probs, targets, threshold)
    positives = targets.round().int().sum(0)

    def plain(v: torch.Tensor) -> float | None:
        return None if v.isnan() else round(float(v), 6)

    return {
        name: {
            "average_precision": plain(ap[i]),
            "auroc": plain(auc[i]),
            "f1": plain(f1[i]),
            "positives": int(positives[i]),
        }
        for i, name in enumerate(names)
    }
