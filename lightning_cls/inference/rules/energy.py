"""``energy``: the task's negative free energy (``logsumexp(z / T)``, Liu et al. 2020;
multi-label: the JointEnergy, Wang et al. 2021)."""

from __future__ import annotations

from lightning_cls.inference.reject_rules import RejectRule


class Energy(RejectRule):
    """``energy``: higher = more in-distribution."""

    name = "energy"
    scores_logits = True

    def scores(self, task, logits, features, rule):
        return task.energy(logits)
