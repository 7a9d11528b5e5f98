"""Rejection rules by name: one ``RejectRule`` class per rule, in the ``REJECT_RULES`` registry.

A rule turns what the network answered into one confidence per image, "higher = more
familiar"; the threshold that keeps ``reject_keep`` of the validation images is chosen the same
way for every rule (``training/calibration.py``) and travels in the spec with the rule's fitted
parameters (``trust.check_reject``). The built-ins:

- ``msp`` and ``energy`` (this module) score the logits, through the task (softmax or sigmoids,
  after the temperature);
- ``knn`` and ``mahalanobis`` (``feature_rules.py``) score the network's ``features`` output
  with parameters fitted on the training split's features.

A new rule is one ``RejectRule`` subclass and one registration:
``REJECT_RULES.register("name", "package.module:Class")`` (lazy) in the table below for a
built-in, or the ``lightning_cls.reject_rules`` entry-point group for a plug-in. Nothing else
changes: ``reject=<name>`` is then checked, fitted by ``calibrate``, carried by every artifact
and applied by predict and the server. No torch import here: ONNX and OpenVINO predict/serve
score with numpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from lightning_cls.inference import arrays
from lightning_cls.registry import Registry

if TYPE_CHECKING:
    from lightning_cls.inference.tasks import Task


class RejectRule:
    """One rejection rule. ``params`` are the keys of what ``fit`` stores in the rule (beside
    ``score``, ``threshold`` and ``keep``); a rule with ``needs_features`` scores the network's
    features, so every runtime must give them (the exporters write them as a second output)."""

    needs_features: ClassVar[bool] = False
    params: ClassVar[tuple[str, ...]] = ()

    def check_options(self, k: Any, bank_size: Any, images: int | None = None) -> None:
        """The command line's options of this rule (``reject_k``, ``reject_bank``), checked
        before any work starts (``images``: how many training images it will be fitted on, once
        known). The logit rules take none."""

    def check_params(self, rule: Mapping[str, Any]) -> dict[str, Any]:
        """The stored parameters of ``rule``, checked; a ``ValueError`` naming what is wrong."""
        return {}

    def fit(self, features, labels, k: int, bank_size: int, seed: int = 0) -> dict[str, Any]:
        """The parameters to store, fitted on the training split's ``features`` and ``labels``
        (only called when ``needs_features``)."""
        return {}

    def scores(self, task: Task, logits, features, rule: Mapping[str, Any]):
        """(B,) confidences, of the kind of ``logits`` (numpy or torch): higher = more familiar."""
        raise NotImplementedError


class MaxSoftmax(RejectRule):
    """``msp``: the largest probability (Hendrycks & Gimpel 2017; multi-label: the largest
    label probability)."""

    def scores(self, task, logits, features, rule):
        probs = task.probabilities(logits)
        return probs.max(axis=1) if arrays.is_numpy(probs) else probs.max(1).values


class Energy(RejectRule):
    """``energy``: the task's negative free energy (``logsumexp(z / T)``, Liu et al. 2020;
    multi-label: the JointEnergy, Wang et al. 2021)."""

    def scores(self, task, logits, features, rule):
        return task.energy(logits)


REJECT_RULES = Registry("rejection rule", "lightning_cls.reject_rules", returns=RejectRule)
for _name, _target in {
    "msp": "lightning_cls.inference.reject_rules:MaxSoftmax",
    "energy": "lightning_cls.inference.reject_rules:Energy",
    "knn": "lightning_cls.inference.feature_rules:KNearest",
    "mahalanobis": "lightning_cls.inference.feature_rules:Mahalanobis",
}.items():
    REJECT_RULES.register(_name, _target)
