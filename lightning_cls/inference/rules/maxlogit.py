"""``maxlogit``: the largest logit after the temperature (Hendrycks et al. 2022; Vaze et al.
2022's maximum logit score); unlike ``msp`` it keeps how large the logits are. No options."""

from __future__ import annotations

from lightning_cls.inference import arrays, trust
from lightning_cls.inference.reject_rules import RejectRule


class MaxLogit(RejectRule):
    """``maxlogit``: higher = more familiar."""

    name = "maxlogit"
    scores_logits = True

    @staticmethod
    def score_logits(logits):
        """(B, K) logits -> (B,) their largest, of the kind of ``logits``."""
        return logits.max(axis=1) if arrays.is_numpy(logits) else logits.max(1).values

    def scores(self, task, logits, features, rule):
        return self.score_logits(trust.scaled(logits, task.temperature))
