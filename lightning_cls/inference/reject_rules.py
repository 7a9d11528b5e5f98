"""Rejection rules by name: one ``RejectRule`` class per rule, in the ``REJECT_RULES`` registry.

A rule turns what the network answered into one confidence per image, "higher = more
familiar"; the threshold that keeps ``reject_keep`` of the validation images is chosen the same
way for every rule (``training/calibration.py``) and travels in the spec with the rule's fitted
parameters (``trust.check_reject``). The built-ins:

- ``msp`` and ``energy`` (``rules/msp.py``, ``rules/energy.py``) score the logits, through the
  task (softmax or sigmoids, after the temperature);
- ``knn`` and ``mahalanobis`` (``rules/knn.py``, ``rules/mahalanobis.py``, on
  ``feature_rules.FeatureRule``) score the network's ``features`` output with state fitted on
  the training split's features.

A new rule is one ``RejectRule`` subclass (its options: its ``__init__``'s keywords), one
registration (``REJECT_RULES.register("name", "package.module:Class")``, lazy, in the table
below for a built-in, or the ``lightning_cls.reject_rules`` entry-point group for a plug-in)
and one ``conf/reject/<name>.yaml`` (``name`` and the options' defaults). Nothing else
changes: ``reject=<name>`` is then checked, fitted by ``calibrate``, carried by every artifact
and applied by predict and the server. No torch import here: ONNX and OpenVINO predict/serve
score with numpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from lightning_cls.registry import Registry

if TYPE_CHECKING:
    from lightning_cls.inference.tasks import Task


class RejectRule:
    """One rejection rule, built with its own options (``REJECT_RULES.create("knn", k=50)``;
    the command line's come from ``conf/reject/<name>.yaml``): a subclass's ``__init__`` takes
    them as keywords with their defaults and checks them. ``params`` are the keys of the state
    ``fit`` returns, stored in the rule beside ``score``, ``threshold`` and ``keep`` and read
    back by ``check_params``; a rule with ``needs_features`` scores the network's features, so
    every runtime must give them (the exporters write them as a second output)."""

    name: ClassVar[str] = ""  # the name it is registered under (messages)
    needs_features: ClassVar[bool] = False
    params: ClassVar[tuple[str, ...]] = ()

    def check_options(self, images: int | None = None) -> None:
        """The rule's options, checked against what it will be fitted on (``images``: how
        many training images, once known); a ``ValueError`` naming the option otherwise."""

    def check_params(self, rule: Mapping[str, Any]) -> dict[str, Any]:
        """The stored state of ``rule`` (its ``params``), checked; a ``ValueError`` naming
        what is wrong."""
        return {}

    def fit(self, features, labels, seed: int = 0) -> dict[str, Any]:
        """The state to store (its options included, when scoring reads them), fitted on the
        training split's ``features`` and ``labels`` (both None unless ``needs_features``)."""
        return {}

    def scores(self, task: Task, logits, features, rule: Mapping[str, Any]):
        """(B,) confidences, of the kind of ``logits`` (numpy or torch): higher = more familiar."""
        raise NotImplementedError


REJECT_RULES = Registry("rejection rule", "lightning_cls.reject_rules", returns=RejectRule)
for _name, _target in {
    "msp": "lightning_cls.inference.rules.msp:MaxSoftmax",
    "energy": "lightning_cls.inference.rules.energy:Energy",
    "knn": "lightning_cls.inference.rules.knn:KNearest",
    "mahalanobis": "lightning_cls.inference.rules.mahalanobis:Mahalanobis",
    "maxlogit": "lightning_cls.inference.rules.maxlogit:MaxLogit",
    "gen": "lightning_cls.inference.rules.gen:GeneralizedEntropy",
    "rmds": "lightning_cls.inference.rules.rmds:RelativeMahalanobis",
}.items():
    REJECT_RULES.register(_name, _target)
