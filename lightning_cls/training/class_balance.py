"""Class imbalance: loss weights from the train split's class counts, and per-class
precision/recall from a confusion matrix.

``class_weights(counts, method)``: ``inverse`` (frequency: w_c proportional to 1 / n_c) or ``effective``
(the effective number of samples, Cui et al. 2019, "Class-Balanced Loss Based on Effective
Number of Samples": w_c proportional to (1 - beta) / (1 - beta^n_c)). Both are scaled so the
weights average 1 over the classes, so the loss keeps its scale on balanced data.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

METHODS = ("inverse", "effective")


def class_counts(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(K,) int64 samples per class."""
    return torch.bincount(labels.cpu().long(), minlength=num_classes)[:num_classes]


def class_weights(
    counts: torch.Tensor, method: str = "inverse", beta: float = 0.999
) -> list[float]:
    """Per-class loss weights (mean 1); a class without samples gets the largest weight."""
    if method not in METHODS:
        raise ValueError(
            f"Unknown task.class_weight_method={method!r}; use one of {', '.join(METHODS)}."
        )
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"loss.effective_beta={beta} must be in [0, 1), e.g. 0.999.")
    n = counts.double().clamp(min=1)  # (K,)
    raw = 1.0 / n if method == "inverse" else (1.0 - beta) / (1.0 - beta**n)
    return (raw * len(n) / raw.sum()).tolist()


class WeightedCrossEntropy(nn.Module):
    """Cross-entropy with per-class weights kept out of the state dict (they travel in the
    module's hyperparameters), so checkpoints of weighted and unweighted runs load alike."""

    def __init__(self, weights: Sequence[float], label_smoothing: float = 0.0):
        super().__init__()
        self.register_buffer("weight", torch.tensor(list(weights)), persistent=False)
        self.label_smoothing = label_smoothing

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        weight = self.weight.to(logits.device, logits.dtype)
        return F.cross_entropy(logits, target, weight, label_smoothing=self.label_smoothing)


def resolve_class_weights(
    setting: str | Sequence[float] | None,
    labels: torch.Tensor | None,
    num_classes: int,
    method: str = "inverse",
    beta: float = 0.999,
) -> list[float] | None:
    """``task.class_weights``: null (none), ``auto`` (from ``labels``, the train split) or
    one weight per class."""
    if setting is None:
        return None
    if isinstance(setting, str):
        if setting != "auto":
            raise ValueError(
                f"task.class_weights={setting!r}; use auto, null or a list of {num_classes} "
                "weights."
            )
        if labels is None:
            raise ValueError("task.class_weights=auto needs the train split's labels.")
        return class_weights(class_counts(labels, num_classes), method, beta)
    weights = [float(w) for w in setting]
    if len(weights) != num_classes:
        raise ValueError(
            f"task.class_weights has {len(weights)} values for {num_classes} classes; give "
            f"{num_classes} or use auto."
        )
    return weights


def per_class_metrics(matrix: torch.Tensor, classes: Sequence[str]) -> dict[str, dict]:
    """Precision, recall and support per class from a (true, predicted) confusion matrix."""
    m = matrix.double()
    tp, support, predicted = m.diag(), m.sum(1), m.sum(0)
    precision = torch.where(predicted > 0, tp / predicted.clamp(min=1), torch.nan)
    recall = torch.where(support > 0, tp / support.clamp(min=1), torch.nan)
    return {
        name: {
            "precision": None if p != p else round(p, 6),
            "recall": None if r != r else round(r, 6),
            "support": int(s),
        }
        for name, p, r, s in zip(classes, precision.tolist(), recall.tolist(), support.tolist())
    }
