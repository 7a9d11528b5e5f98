"""``combined``: an image is unknown when a feature rule OR a logit score says so, each past
its own threshold (the two catch different unknowns: the features pictures unlike the
training photos, the logits images between the classes).

Its options (``conf/reject/combined.yaml``): ``feature`` (a rule over the features, with its
own options: ``{name: knn, ...}``, or its name), ``logit`` (a rule over the logits alone:
``maxlogit``, ``energy``, ``msp``, ``gen``), each one's ``feature_keep``/``logit_keep`` and
``join`` (below).
``fit`` holds out ``HOLDOUT`` of the training images: the feature rule is fitted on the rest,
and each rule's threshold is the one keeping its own keep of the held-out images, its spread
their scores' standard deviation. Each rule's margin is ``(score - threshold) / spread``
(below 0: past its own threshold). The one score, by ``join``:

- ``gate`` (the default): the logit margin, or the smaller of the two margins where the
  feature rule says unknown (its margin below 0). Images the feature rule accepts are ranked by
  the logit score alone, so unknown classes are ranked as the logit rule ranks them (the
  feature rules rank them worse: docs/guides/calibration.md), and whatever the feature rule
  rejects stays below 0. Calibration's threshold ``t`` (keeping ``calibration.keep`` of the
  validation images) is then the logit rule's, in its spreads, and the feature rule's is
  ``min(t, 0)``.
- ``min``: the smaller of the two margins; calibration's threshold moves both rules'
  thresholds together, by the same number of spreads.

Either way the threshold 0 rejects exactly what either rule rejects at its own threshold.
Its stored state: ``join`` and each rule's own (``score``, ``threshold``, ``spread``, ``keep``
and its fitted state); a state without ``join`` (fitted before it existed) joins by ``min``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from lightning_cls.inference import arrays, trust
from lightning_cls.inference.reject_rules import REJECT_RULES, RejectRule

HOLDOUT = 0.2  # the share of the training images each rule's threshold is chosen on
PARTS = ("feature", "logit")
JOINS = ("gate", "min")


def check_part(part: str, choice: Any, keep: Any) -> tuple[RejectRule, float]:
    """The rule ``reject.<part>`` chooses, built with its options, and its keep; a
    ``ValueError`` naming the option otherwise."""
    name, _ = trust.rule_choice(choice)
    rule = trust.build_rule(choice)
    wants_features = part == "feature"
    if rule is None or isinstance(rule, Combined) or rule.needs_features != wants_features:
        kind = "scores the network's features" if wants_features else "scores the logits alone"
        raise ValueError(
            f"reject.{part}={name!r} is not a rule that {kind}; give reject.{part}.name="
            f"{'knn' if wants_features else 'maxlogit'} (or another such rule)."
        )
    try:
        return rule, trust.check_keep(keep)
    except ValueError:
        raise ValueError(
            f"reject.{part}_keep={keep!r} is not a share strictly between 0 and 1; e.g. "
            f"reject.{part}_keep=0.95 keeps 95% of the held-out training images by that rule."
        ) from None


def check_join(join: Any) -> str:
    if join not in JOINS:
        raise ValueError(
            f"reject.join={join!r} is not one of {list(JOINS)}; reject.join=gate ranks what the "
            "feature rule accepts by the logit score, reject.join=min by the smaller margin."
        )
    return join


def check_number(part: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"reject.{part}.{key}={value!r} is not a finite number; fit again.")
    return float(value)


class Combined(RejectRule):
    """``combined``: higher = more familiar; below 0: past a rule's own threshold."""

    name = "combined"
    needs_features = True
    needs_logits = True
    params = (*PARTS, "join")

    def __init__(
        self,
        feature: Any = "knn",
        logit: Any = "energy",
        feature_keep: float = 0.98,
        logit_keep: float = 0.95,
        join: str = "gate",
    ):
        self.feature, self.feature_keep = check_part("feature", feature, feature_keep)
        self.logit, self.logit_keep = check_part("logit", logit, logit_keep)
        self.join = check_join(join)
        self.needs_head = self.feature.needs_head  # a head rule as the feature rule

    def check_options(self, images=None):
        held = None if images is None else images - max(1, round(HOLDOUT * images))
        self.feature.check_options(held)

    def fit(self, features, labels, seed=0, *, logits=None, task=None, head=None):
        self.check_given(
            {"logits": logits, "task": task, **({"head": head} if self.needs_head else {})}
        )
        features, logits = arrays.as_numpy(features), arrays.as_numpy(logits)
        labels = np.asarray(labels)
        order = np.random.default_rng(seed).permutation(len(features))
        held, rest = np.split(order, [max(1, round(HOLDOUT * len(features)))])
        if len(held) < 2 or len(rest) < 1:
            raise ValueError(
                f"reject=combined holds out {HOLDOUT:.0%} of the training images to choose each "
                f"rule's threshold and fits the feature rule on the rest; {len(features)} "
                "training images are too few."
            )
        out: dict[str, Any] = {"join": self.join}
        for part, rule, keep in (
            ("feature", self.feature, self.feature_keep),
            ("logit", self.logit, self.logit_keep),
        ):
            state = rule.fit_outputs(
                features[rest], labels[rest], seed, logits=logits[rest], task=task, head=head
            )
            stored = {"score": rule.name, **state}
            scores = arrays.as_numpy(rule.scores(task, logits[held], features[held], stored))
            spread = float(np.std(scores.astype(np.float64)))
            out[part] = {
                **stored,
                "threshold": trust.quantile_threshold(scores, keep),
                "spread": spread if spread > 0 else 1.0,
                "keep": keep,
            }
        return out

    def check_params(self, rule):
        missing = [part for part in PARTS if not isinstance(rule.get(part), Mapping)]
        if missing:
            raise ValueError(
                f"reject=combined lacks its fitted {' and '.join(missing)} rule; fit it on the "
                "training split (python -m lightning_cls.calibrate reject=combined)."
            )
        out: dict[str, Any] = {"join": check_join(rule.get("join", "min"))}
        for part in PARTS:
            stored = rule[part]
            score = trust.check_score(stored.get("score"))
            sub, keep = check_part(part, score, stored.get("keep"))
            known = {"score", "threshold", "spread", "keep", *sub.params}
            unknown = sorted(set(stored) - known)
            if unknown:
                raise ValueError(
                    f"reject.{part} has unknown key(s) {unknown} for score={score}; known: "
                    f"{sorted(known)}."
                )
            spread = check_number(part, "spread", stored.get("spread"))
            if spread <= 0:
                raise ValueError(f"reject.{part}.spread={spread!r} is not > 0; fit again.")
            out[part] = {
                "score": score,
                "threshold": check_number(part, "threshold", stored.get("threshold")),
                "spread": spread,
                "keep": keep,
                **sub.check_params(stored),
            }
        return out

    def margins(self, task, logits, features, rule) -> dict[str, np.ndarray]:
        """Per rule, (B,) float64 ``(score - threshold) / spread``: below 0, past its own
        threshold."""
        out = {}
        for part in PARTS:
            stored = rule[part]
            sub = REJECT_RULES.create(stored["score"])
            scores = arrays.as_numpy(sub.scores(task, logits, features, stored)).astype(np.float64)
            out[part] = (scores - stored["threshold"]) / stored["spread"]
        return out

    def scores(self, task, logits, features, rule):
        if features is None:
            raise ValueError(
                "reject=combined scores the network's features, and none were given; run the "
                "model through a Predictor (it asks the runtime for them)."
            )
        raw, features = arrays.as_numpy(logits), arrays.as_numpy(features)
        margins = self.margins(task, raw, features, rule)
        feature, logit = margins["feature"], margins["logit"]
        if rule.get("join", "min") == "gate":  # the feature margin counts where it rejects
            feature = np.where(feature < 0, feature, np.inf)
        combined = np.minimum(feature, logit).astype(np.float32)
        return arrays.as_kind(combined, logits)
