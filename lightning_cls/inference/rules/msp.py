"""``msp``: the largest probability (Hendrycks & Gimpel 2017; multi-label: the largest label
probability)."""

from __future__ import annotations

from lightning_cls.inference import arrays
from lightning_cls.inference.reject_rules import RejectRule


class MaxSoftmax(RejectRule):
    """``msp``: the task's largest probability, after the temperature."""

    name = "msp"

    def scores(self, task, logits, features, rule):
        probs = task.probabilities(logits)
        return probs.max(axis=1) if arrays.is_numpy(probs) else probs.max(1).values
