"""``react`` (Sun et al. 2021, "ReAct: Out-of-distribution Detection With Rectified
Activations"): the energy of the logits recomputed from the penultimate features clipped at
the ``percentile``-th percentile of the training images' (``W min(h, c) + b``). Its option
(``conf/reject/react.yaml``): ``percentile`` in (0, 100], 90 the paper's; its stored state:
the option, the clip ``c`` and the last linear layer (``feature_rules.HeadRule``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lightning_cls.inference.feature_rules import HeadRule, one_blas_thread

DEFAULT_PERCENTILE = 90.0


def check_percentile(percentile: Any) -> float:
    """``reject.percentile``: a number in (0, 100]; a ``ValueError`` otherwise."""
    if (
        isinstance(percentile, bool)
        or not isinstance(percentile, (int, float))
        or not math.isfinite(percentile)
        or not 0 < percentile <= 100
    ):
        raise ValueError(
            f"reject.percentile={percentile!r} is not a number in (0, 100]; ReAct clips the "
            f"penultimate features at that percentile of the training images' (e.g. "
            f"reject.percentile={DEFAULT_PERCENTILE:g}, the paper's)."
        )
    return float(percentile)


class ReAct(HeadRule):
    """``react``: higher = more familiar."""

    name = "react"
    params = ("weight", "bias", "percentile", "clip")

    def __init__(self, percentile: float = DEFAULT_PERCENTILE):
        self.percentile = check_percentile(percentile)

    def fit_head(self, h, logits, weight, bias, task):
        return {"percentile": self.percentile, "clip": float(np.percentile(h, self.percentile))}

    def check_state(self, rule, stored):
        clip = rule["clip"]
        if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not math.isfinite(clip):
            raise ValueError(f"reject.clip={clip!r} is not a finite number; fit the rule again.")
        return {
            **super().check_state(rule, stored),
            "percentile": check_percentile(rule["percentile"]),
            "clip": float(clip),
        }

    def head_scores(self, task, rule, stored, h, logits):
        weight, bias = stored["weight"].astype(np.float64), stored["bias"].astype(np.float64)
        with one_blas_thread():
            rectified = np.minimum(h, float(rule["clip"])) @ weight.T + bias  # (B, K)
        return task.energy(rectified.astype(np.float32))
