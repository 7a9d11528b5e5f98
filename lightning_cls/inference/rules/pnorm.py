"""``pnorm`` (MaxLogit-pNorm, Cattelan & Silva 2023, "How to Fix a Broken Confidence
Estimator"): the largest logit after the temperature divided by the logits' ``p``-norm, which
keeps the logits' shape and drops their overall size. Its option (``conf/reject/pnorm.yaml``):
``p`` >= 1 (2: the Euclidean norm), stored in the rule."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lightning_cls.inference import arrays, trust
from lightning_cls.inference.reject_rules import RejectRule

DEFAULT_P = 2.0


def check_p(p: Any) -> float:
    """``reject.p``: a finite number >= 1; a ``ValueError`` otherwise."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or p < 1:
        raise ValueError(
            f"reject.p={p!r} is not a finite number >= 1; the norm the largest logit is divided "
            f"by (e.g. reject.p={DEFAULT_P:g}, the Euclidean norm)."
        )
    return float(p)


class MaxLogitPNorm(RejectRule):
    """``pnorm``: higher = more familiar."""

    name = "pnorm"
    scores_logits = True
    params = ("p",)

    def __init__(self, p: float = DEFAULT_P):
        self.p = check_p(p)

    def fit(self, features, labels, seed=0):
        return {"p": self.p}

    def check_params(self, rule):
        return {"p": check_p(rule.get("p", DEFAULT_P))}

    def scores(self, task, logits, features, rule):
        p = float(rule.get("p", self.p)) if rule else self.p
        z = arrays.as_numpy(trust.scaled(logits, task.temperature)).astype(np.float64)
        norm = np.maximum(np.linalg.norm(z, ord=p, axis=1), 1e-12)
        return arrays.as_kind((z.max(axis=1) / norm).astype(np.float32), logits)
