"""``msp``: the largest probability (Hendrycks & Gimpel 2017; multi-label: the largest label
probability)."""

from __future__ import annotations

from lightning_cls.inference import arrays
from lightning_cls.inference.reject_rules import RejectRule

# The name, and the confidence the library judges its own answers by where no rule is asked
# (selective TTA's "is the plain pass sure?", the open-set report's default score).
MSP = "msp"


class MaxSoftmax(RejectRule):
    """``msp``: the task's largest probability, after the temperature."""

    name = MSP

    def scores(self, task, logits, features, rule):
        probs = task.probabilities(logits)
        return probs.max(axis=1) if arrays.is_numpy(probs) else probs.max(1).values
