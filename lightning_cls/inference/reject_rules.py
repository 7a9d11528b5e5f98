"""Rejection rules by name: one ``RejectRule`` class per rule, in the ``REJECT_RULES`` registry.

A rule turns what the network answered into one confidence per image, "higher = more
familiar"; the threshold that keeps ``reject_keep`` of the validation images is chosen the same
way for every rule (``training/calibration.py``) and travels in the spec with the rule's fitted
parameters (``trust.check_reject``). The built-ins:

- ``msp`` and ``energy`` (``rules/msp.py``, ``rules/energy.py``) score the logits, through the
  task (softmax or sigmoids, after the temperature);
- ``knn`` and ``mahalanobis`` (``rules/knn.py``, ``rules/mahalanobis.py``, on
  ``feature_rules.FeatureRule``) score the network's ``features`` output with state fitted on
  the training split's features;
- ``react`` and ``vim`` (on ``feature_rules.HeadRule``) also read the logits and store the
  network's last linear layer; ``combined`` is a feature rule OR a logit rule, each at its
  own threshold.

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
    """One rejection rule, built with its own options (``REJECT_RULES.create("gen", gamma=0.5)``;
    the command line's come from ``conf/reject/<name>.yaml``): a subclass's ``__init__`` takes
    them as keywords with their defaults and checks them. ``params`` are the keys of the state
    ``fit`` returns, stored in the rule beside ``score``, ``threshold`` and ``keep`` and read
    back by ``check_params``; a rule with ``needs_features`` scores the network's features, so
    every runtime must give them (the exporters write them as a second output).

    What a rule is fitted on, it declares: ``needs_features`` (the training images' features
    and labels), ``needs_logits`` (their raw logits and the ``task``, whose temperature and
    probabilities score them) and ``needs_head`` (the network's last linear layer, ``head``:
    its weight (K, D) and bias (K,)). ``fit_outputs`` gives each rule what it declares."""

    name: ClassVar[str] = ""  # the name it is registered under (messages)
    needs_features: ClassVar[bool] = False
    needs_logits: ClassVar[bool] = False  # fit takes the training images' logits and the task
    needs_head: ClassVar[bool] = False  # fit takes head=(weight, bias) of the last linear layer
    # The score reads the logits' own scale, which probabilities alone do not give back (a
    # runtime answering probabilities, Core ML's classifier, cannot score it).
    scores_logits: ClassVar[bool] = False
    params: ClassVar[tuple[str, ...]] = ()

    def check_options(self, images: int | None = None) -> None:
        """The rule's options, checked against what it will be fitted on (``images``: how
        many training images, once known); a ``ValueError`` naming the option otherwise."""

    def check_params(self, rule: Mapping[str, Any]) -> dict[str, Any]:
        """The stored state of ``rule`` (its ``params``), checked; a ``ValueError`` naming
        what is wrong."""
        return {}

    def fit(self, features, labels, seed: int = 0, **given: Any) -> dict[str, Any]:
        """The state to store (its options included, when scoring reads them), fitted on the
        training split's ``features`` and ``labels`` (both None unless ``needs_features``) and
        on what the rule declares it needs (``given``: ``logits``, ``task``, ``head``)."""
        return {}

    def fit_outputs(
        self, features, labels, seed: int = 0, *, logits=None, task=None, head=None
    ) -> dict[str, Any]:
        """``fit`` given what this rule declares it needs of the training images' outputs
        (``logits`` and ``task``: ``needs_logits``; ``head``, (weight, bias) or the
        ``nn.Linear``: ``needs_head``); a ``ValueError`` naming what is missing."""
        given: dict[str, Any] = {}
        if self.needs_logits or self.needs_head:
            given.update(logits=logits, task=task)
        if self.needs_head:
            given["head"] = head
        self.check_given(given)
        return self.fit(features, labels, seed, **given)

    def check_given(self, given: Mapping[str, Any]) -> None:
        """A ``ValueError`` naming what of ``given`` (what ``fit`` needs) is None."""
        missing = [key for key, value in given.items() if value is None]
        if missing:
            raise ValueError(
                f"reject={self.name} is fitted on the training images' {' and '.join(missing)} "
                "(head: the network's last linear layer), and none were given; fit it through "
                "RejectRule.fit_outputs, which gives each rule what it declares."
            )

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
    "pnorm": "lightning_cls.inference.rules.pnorm:MaxLogitPNorm",
    "react": "lightning_cls.inference.rules.react:ReAct",
    "vim": "lightning_cls.inference.rules.vim:VirtualLogit",
    "combined": "lightning_cls.inference.rules.combined:Combined",
}.items():
    REJECT_RULES.register(_name, _target)
