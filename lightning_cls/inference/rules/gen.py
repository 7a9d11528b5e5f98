"""``gen``: minus the generalised entropy ``sum_k p_k^gamma (1 - p_k)^gamma`` of the task's
probabilities after the temperature (Liu et al. 2023, "GEN: Pushing the Limits of
Softmax-Based Out-of-Distribution Detection"). Its option (``conf/reject/gen.yaml``):
``gamma`` in (0, 1], stored in the rule."""

from __future__ import annotations

import math
from typing import Any

from lightning_cls.inference.reject_rules import RejectRule

DEFAULT_GAMMA = 0.1


def check_gamma(gamma: Any) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0 < gamma <= 1:
        raise ValueError(
            f"reject.gamma={gamma!r} is not a number in (0, 1]; GEN's exponent (e.g. "
            f"reject.gamma={DEFAULT_GAMMA}, the paper's)."
        )
    if not math.isfinite(gamma):
        raise ValueError(f"reject.gamma={gamma!r} is not finite.")
    return float(gamma)


class GeneralizedEntropy(RejectRule):
    """``gen``: higher = more familiar (a confident answer has a small generalised entropy)."""

    name = "gen"
    params = ("gamma",)

    def __init__(self, gamma: float = DEFAULT_GAMMA):
        self.gamma = check_gamma(gamma)

    def fit(self, features, labels, seed=0):
        return {"gamma": self.gamma}

    def check_params(self, rule):
        return {"gamma": check_gamma(rule.get("gamma", DEFAULT_GAMMA))}

    @staticmethod
    def score_probabilities(probs, gamma: float):
        """(B, K) probabilities -> (B,) minus their generalised entropy, same kind."""
        return -((probs**gamma) * (1 - probs) ** gamma).sum(1)

    def scores(self, task, logits, features, rule):
        gamma = rule.get("gamma", self.gamma) if rule else self.gamma
        return self.score_probabilities(task.probabilities(logits), float(gamma))
