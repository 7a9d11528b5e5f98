"""Calibration after training: the temperature, the rejection rule and prediction sets, fitted
on validation by one ``Calibrator``.

A ``Calibrator`` is built from the ``conf/calibration`` group (``temperature``,
``temperature_fit``, ``keep``, ``conformal``, ``conformal_method``, ``choose_threshold``) and the
rule the ``reject`` group chooses (``Calibrator.from_options``); ``Calibrator.fit(net, spec,
splits)`` is the one call the calibrate command and train's ``Calibrate`` callback share. It runs
the network over the validation images exactly as predict does (``Predictor.image_logits``: the
artifact's preprocessing and TTA), then

- fits the **temperature** (``training/temperature.py``, Guo et al. 2017): ``T = exp(t)``
  minimising the validation NLL (multi-label: one per label); ``temperature_fit="ece"`` then
  rescales it to the lowest validation ECE: a model trained with label smoothing has a
  NLL-best ``T`` that leaves its confidence too low (measured on CIFAR-10 photos in
  docs/guides/calibration.md), so ``"auto"`` (the default) picks ``"ece"`` for such a model and
  ``"nll"`` for every other. Dividing logits by a positive ``T`` keeps their order, so the top-1
  label and each label's ranking do not change; a multi-label model's decision threshold is
  chosen again on the calibrated probabilities unless it was fixed (``choose_threshold=False``).
- chooses the **rejection threshold** (the rule's ``fit``, then the ``1 - keep`` quantile of the
  validation images' score), so ``keep`` of them are answered and the rest ``unknown``.
- fits **prediction sets** (``conformal=alpha``, ``inference/conformal.py``: APS or RAPS) on
  the validation probabilities after the temperature, and reports their coverage and mean
  size on validation and the held-out split.

It reports the expected calibration error (15 equal-width bins) before and after, on validation
and, when given, on a held-out split, and draws a reliability diagram (``figures/calibration.py``). The result's
``spec_updates`` (``temperature``, ``reject``, ``threshold``, ``conformal``) are what the
checkpoint's task and every exported artifact's ``InputSpec`` carry from then on.

No torch import here (``training/temperature.py`` is imported when a fit runs): a command checks
its calibration options before anything heavy loads.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_cls.inference import conformal as conformal_sets
from lightning_cls.inference import feature_rules
from lightning_cls.inference.predictor import Predictor
from lightning_cls.inference.reject_rules import RejectRule
from lightning_cls.inference.spec import InputSpec, Split
from lightning_cls.inference.trust import (
    build_rule,
    check_keep,
    check_temperature_fit,
    quantile_threshold,
    rule_choice,
)

if TYPE_CHECKING:
    from torch import nn

log = logging.getLogger(__name__)
# Fewer validation images than this and calibrate fits anyway, with one warning. Below it the
# numbers it fits and reports are mostly noise: one image moves the ECE by 1/N (0.067 at 15
# images, with 15 bins of about one image each), the rejection threshold at keep=0.95 is the
# 5% quantile (fewer than 5 images below it), split conformal's quantile at alpha=0.1 rests on
# N/10 images, and a temperature fitted to a handful of confident hits runs off to T >> 1.
# 100 is where each of these rests on at least 5 images (ECE per image: 0.01).
MIN_VAL_IMAGES = 100
GROUP = "calibration"  # the config group (conf/calibration/<name>.yaml) of Calibrator's options
# The checks' messages name these keys as the group spells them (calibration.keep=...).
_GROUP_KEYS = {
    "reject_keep": "keep",
    "temperature": "temperature",
    "temperature_fit": "temperature_fit",
    "conformal": "conformal",
    "conformal_method": "conformal_method",
}


@dataclass
class Calibration:
    """What a ``Calibrator`` chose and measured; ``report()`` is the ``results.json`` entry."""

    temperature: float | list[float]
    reject: dict[str, Any] | None
    threshold: float | None  # a multi-label model's decision threshold (None: multi-class)
    metrics: dict[str, Any] = field(default_factory=dict)
    conformal: dict[str, Any] | None = None  # the prediction-set rule (inference/conformal.py)

    @property
    def spec_updates(self) -> dict[str, Any]:
        """The hyper-parameters / spec keys that carry the calibration."""
        updates = {"temperature": self.temperature, "reject": self.reject}
        updates["conformal"] = self.conformal  # None removes a rule fitted before
        if self.threshold is not None:
            updates["threshold"] = self.threshold
        return updates

    def report(self) -> dict[str, Any]:
        """The ``results.json`` entry: a feature-space rule's arrays shown by their shapes."""
        return {**self.spec_updates, "reject": feature_rules.summary(self.reject), **self.metrics}

    def summary(self) -> str:
        """A few lines for people (the log): the temperature, ECE before -> after, the share
        the rejection rule keeps, the prediction sets' coverage; only the lines that apply
        (``report()`` has every number)."""
        m = self.metrics
        lines = [f"Calibration on {m.get('images', '?')} validation images:"]
        lines.append(f"  temperature {_temperature_text(self.temperature, m)}")
        for split in ("val", "test"):
            if f"{split}_ece_before" in m:
                before, after = m[f"{split}_ece_before"], m[f"{split}_ece_after"]
                lines.append(f"  ECE ({split}) {before:.3f} -> {after:.3f}")
        if self.threshold is not None:
            lines.append(f"  decision threshold {self.threshold:.3f}")
        if self.reject is not None:
            kept = f"keeps {self.reject['keep']:.1%} of val"
            if "test_kept" in m:
                kept += f", {m['test_kept']:.1%} of test"
            lines.append(f"  rejection ({self.reject['score']}): {kept}; the rest is unknown")
        if self.conformal is not None:
            sets = ", ".join(
                f"{m[f'{s}_coverage']:.1%} on {s} (mean size {m[f'{s}_mean_set_size']:.2f})"
                for s in ("val", "test")
                if f"{s}_coverage" in m
            )
            target = 1 - self.conformal["alpha"]
            lines.append(f"  prediction sets ({target:.0%} target): coverage {sets}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Calibrator:
    """What calibration fits on the validation split, and how; ``fit`` fits it.

    ``temperature``: true fits one (multi-label: one per label), false keeps the spec's, a
    number > 0 is used as given; ``temperature_fit``: ``nll`` | ``ece`` | ``auto``; ``rule``: a
    ``RejectRule`` (``REJECT_RULES.create(name, **options)``, registered as ``rule_name``) or
    None, its threshold keeping ``keep`` of the validation images; ``conformal``: the
    miscoverage alpha of prediction sets (``conformal_method``: ``aps`` | ``raps``) or None;
    ``choose_threshold``: choose a multi-label model's decision threshold again;
    ``diagram``: where the reliability PNG goes (None: none). Checked when built: a bad
    option is one ``ValueError`` naming ``calibration.<key>=`` and the fix."""

    temperature: bool | float = True
    temperature_fit: str = "auto"
    keep: float = 0.95
    conformal: float | None = None
    conformal_method: str = conformal_sets.DEFAULT_METHOD
    choose_threshold: bool = True
    rule: RejectRule | None = None
    rule_name: str | None = None
    diagram: str | Path | None = None
    batch_size: int = 256

    def __post_init__(self) -> None:
        with _named_as_group_keys():
            check_temperature_option(self.temperature)
            check_temperature_fit(self.temperature_fit)
            conformal_sets.check_options(self.conformal, self.conformal_method)
            check_keep(self.keep)  # a bad share is refused with or without a rule
        if not isinstance(self.choose_threshold, bool):
            raise ValueError(
                f"calibration.choose_threshold={self.choose_threshold!r} is not true or false."
            )
        if self.rule is not None and not self.rule_name:  # the name the fitted rule is stored as
            object.__setattr__(self, "rule_name", self.rule.name or None)
            if not self.rule_name:
                raise ValueError(f"{type(self.rule).__name__} has no name; give rule_name=.")

    @classmethod
    def from_options(cls, options: Mapping[str, Any], reject: Any = None) -> Calibrator:
        """From the ``conf/calibration`` group's keys (a plain mapping; ``diagram`` and
        ``batch_size`` too) and the rule the ``reject`` group chooses (``{name: <rule>, **its
        options}`` or a name; None: none), built with its options through ``REJECT_RULES``."""
        known = sorted(f.name for f in fields(cls) if f.name not in ("rule", "rule_name"))
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(
                f"{GROUP} has no option {unknown[0]!r}; its options: {', '.join(known)} "
                f"(conf/{GROUP}/default.yaml)."
            )
        return cls(**options, rule=build_rule(reject), rule_name=rule_choice(reject)[0])

    @property
    def fits_anything(self) -> bool:
        """Whether there is anything to fit: a temperature, a rule or prediction sets."""
        return self.temperature is not False or self.rule is not None or self.conformal is not None

    @property
    def needs_features(self) -> bool:
        return self.rule is not None and self.rule.needs_features

    @property
    def needs_train(self) -> bool:
        """Whether the rule is fitted on the training images' outputs (features, logits or
        the network's head: what it declares, ``RejectRule.fit_outputs``)."""
        rule = self.rule
        return rule is not None and (rule.needs_features or rule.needs_logits or rule.needs_head)

    def fit(
        self, net: nn.Module, spec: InputSpec, splits: Mapping[str, Split | None]
    ) -> Calibration:
        """Fit on ``splits["val"]`` (a feature-space rule on ``splits["train"]``'s features) and
        measure on ``val`` and ``splits["test"]`` when given: the temperature, the task's
        threshold, the rule's threshold, the prediction sets, in that order, each on the
        probabilities after the ones before (as predict has them)."""
        val, train = self._checked_splits(spec, splits)
        base = spec.with_decision(temperature=1.0, reject=None)  # the network's own probabilities
        base.decision.labels.check(val.labels, "calibration")
        predictor = Predictor(net.eval(), base)
        outputs = predictor.image_features if self.needs_features else predictor.image_outputs
        logits, features = outputs(val.images, self.batch_size)  # (N, K) float32, (N, D) | None
        fitted, metrics = self._temperature(spec, base, logits, val.labels)
        calibrated = base.with_decision(temperature=_plain(fitted))
        threshold = None  # the task's own choice on the calibrated probabilities (if it has one)
        if self.choose_threshold:
            probs = calibrated.decision.probabilities(logits)
            threshold = base.decision.calibration.choose_threshold(probs, val.labels)
        if threshold is not None:
            calibrated = calibrated.with_decision(threshold=threshold)
        if self.rule is not None:
            calibrated = self._fit_rule(calibrated, predictor, train, logits, features)
        if self.conformal is not None:  # on the probabilities after the temperature
            probs = calibrated.decision.probabilities(logits).numpy()
            sets = conformal_sets.fit(
                probs, val.labels.numpy(), self.conformal, self.conformal_method
            )
            calibrated = calibrated.with_decision(conformal=sets)
        metrics.update(_measure("val", base, calibrated, (logits, features), val.labels))
        test = splits.get("test")
        if test is not None and len(test):
            held_out = outputs(test.images, self.batch_size)
            metrics.update(_measure("test", base, calibrated, held_out, test.labels))
        if self.diagram is not None:
            from lightning_cls.figures.calibration import reliability_diagram
            from lightning_cls.training.temperature import BINS

            probs = (base.decision.probabilities(logits), calibrated.decision.probabilities(logits))
            drawn = reliability_diagram(
                *probs, val.labels, base.decision.calibration, self.diagram, BINS
            )
            metrics["reliability_diagram"] = str(drawn)
        rules = calibrated.decision
        result = Calibration(_plain(fitted), rules.reject, threshold, metrics, rules.conformal)
        log.info("%s", result.summary())
        log.debug("Calibration (results.json's entry): %s", result.report())
        return result

    def _checked_splits(self, spec: InputSpec, splits: Mapping[str, Split | None]) -> tuple:
        """(val, train), after the checks that need the model or the data: sets are for
        single-label models, a feature-space rule needs training images, val must hold some."""
        if self.conformal is not None:
            spec.decision.calibration.refuse_sets()  # InputSpec's own check
        val, train = splits.get("val"), splits.get("train")
        if self.needs_train:
            if train is None or len(train) == 0:
                raise ValueError(
                    f"reject={self.rule_name} is fitted on the training images' features, and no "
                    "training images were given; calibrate with data that has a train split."
                )
            self.rule.check_options(images=len(train))
        if val is None or len(val) == 0:
            raise ValueError("Calibration needs validation images, but the val split is empty.")
        warn_small_validation(len(val))
        return val, train

    def _temperature(self, spec: InputSpec, base: InputSpec, logits, labels) -> tuple:
        """The temperature ``self.temperature`` asks for (fitted, the spec's, or the number
        given; ``base``: the spec at temperature 1) and the report's first entries."""
        from lightning_cls.training.temperature import BINS, fit_temperature, rescale_for_ece

        report: dict[str, Any] = {"split": "val", "images": len(labels), "bins": BINS}
        task = base.decision
        if self.temperature is False:
            return spec.decision.temperature, report
        if self.temperature is not True:  # a number the user set: used as given, measured
            return task.calibration.check_temperature(self.temperature, spec.num_classes), report
        objective = self.temperature_fit
        if objective == "auto":
            objective = "ece" if spec.task["label_smoothing"] > 0 else "nll"
        fitted = fit_temperature(logits, labels, task)
        report["temperature_fit"] = objective
        if objective == "ece":
            report["temperature_nll"] = fitted
            fitted = rescale_for_ece(logits, labels, task, fitted)
        return fitted, report

    def _fit_rule(self, calibrated: InputSpec, predictor, train, logits, features) -> InputSpec:
        """``calibrated`` with the rule's state (fitted on what it declares of ``train``'s
        outputs: features, raw logits with the calibrated task, the network's last linear
        layer; ``RejectRule.fit_outputs``) and the threshold that keeps ``keep`` of the
        validation images, scored after the temperature."""
        given: dict[str, Any] = {"logits": None, "task": calibrated.decision, "head": None}
        train_features = labels = None  # a logit rule stores its options alone
        if self.needs_train:
            outputs = predictor.image_features if self.needs_features else predictor.image_outputs
            given["logits"], train_features = outputs(train.images, self.batch_size)
            labels = train.labels
        if self.rule.needs_head:
            from lightning_cls.inference.network import with_features

            given["head"] = with_features(predictor.runtime).head  # the eager network's
        params = self.rule.fit_outputs(train_features, labels, **given)
        fitted = {"score": self.rule_name, "threshold": 0.0, "keep": self.keep, **params}
        calibrated = calibrated.with_decision(reject=fitted)  # its threshold comes next
        scores = calibrated.decision.confidence(logits, features=features)
        threshold = quantile_threshold(scores.numpy(), self.keep)
        return calibrated.with_decision(reject={**fitted, "threshold": threshold})


def calibrate(
    net: nn.Module,
    spec: InputSpec,
    val: Split,
    test: Split | None = None,
    *,
    reject: Any = None,
    train: Split | None = None,
    **options: Any,
) -> Calibration:
    """``Calibrator.from_options(options, reject).fit(net, spec, splits)`` in one call (a
    notebook, a benchmark, a test): ``options`` are the ``Calibrator``'s (``temperature``,
    ``keep``, ``conformal``, ``diagram`` ...), ``reject`` a rule's name or ``{name, **its
    options}``. The commands build their ``Calibrator`` from the config instead."""
    calibrator = Calibrator.from_options(options, reject)
    return calibrator.fit(net, spec, {"val": val, "test": test, "train": train})


def check_temperature_option(value: Any) -> bool | float:
    """``temperature``: true (fit one), false (keep the checkpoint's) or a number > 0 (use it);
    anything else is one line naming the value."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value > 0 and value != float("inf"):
        return float(value)
    raise ValueError(
        f"temperature={value!r} is not true, false or a number > 0; temperature=true fits one on "
        "validation, temperature=false keeps the checkpoint's, temperature=1.5 sets it."
    )


@contextmanager
def _named_as_group_keys() -> Iterator[None]:
    """A check's ``ValueError`` with each option named as the group spells it on the command
    line (``reject_keep=1.5`` -> ``calibration.keep=1.5``): the key the user wrote."""
    try:
        yield
    except ValueError as err:
        text = str(err)
        for old, new in _GROUP_KEYS.items():
            text = re.sub(rf"(?<![\w.]){old}=", f"{GROUP}.{new}=", text)
        raise ValueError(text) from None


def _measure(split: str, base: InputSpec, calibrated: InputSpec, outputs, labels) -> dict:
    """ECE, NLL and the task's score before and after, the prediction sets' coverage and, on
    the held-out split, the share the rule keeps; ``outputs``: (logits, features | None)."""
    from lightning_cls.training.temperature import measure

    logits, features = outputs
    out = {**measure(split, base, calibrated, logits, labels)}
    out.update(_measure_sets(split, calibrated, logits, labels))
    if split == "test" and calibrated.decision.reject is not None:
        scores = calibrated.decision.confidence(logits, features=features)
        kept = (scores >= calibrated.decision.reject["threshold"]).float().mean().item()
        out["test_kept"] = round(kept, 6)
    return out


def warn_small_validation(images: int) -> None:
    """One warning line when ``images`` is under ``MIN_VAL_IMAGES`` (why: where it is set)."""
    if images < MIN_VAL_IMAGES:
        log.warning(
            "Calibrating on %d validation images, fewer than %d: the temperature, ECE and "
            "thresholds fitted on so few are noise; hold out more (e.g. data.val_size=0.2, or "
            "more images in the val folder) and calibrate again.",
            images, MIN_VAL_IMAGES,
        )  # fmt: skip


def _temperature_text(temperature: float | list[float], metrics: dict) -> str:
    """``T = 1.84 (fitted: nll)``; one per label: their range and mean."""
    how = f" (fitted: {metrics['temperature_fit']})" if "temperature_fit" in metrics else ""
    if isinstance(temperature, list):
        low, high = min(temperature), max(temperature)
        mean = sum(temperature) / len(temperature)
        return f"T per label {low:.3g}..{high:.3g} (mean {mean:.3g}){how}"
    return f"T = {temperature:.3g}{how}"


def _measure_sets(split: str, calibrated: InputSpec, logits, labels) -> dict[str, float]:
    """The prediction sets' coverage (share holding the true label) and mean size on
    ``split``; nothing without a conformal rule. On ``val`` they are in-sample (fitted there)."""
    rule = calibrated.decision.conformal
    if rule is None:
        return {}
    probs = calibrated.decision.probabilities(logits).numpy()  # (N, K) as predict has them
    return {
        f"{split}_coverage": round(float(conformal_sets.covered(probs, labels, rule).mean()), 6),
        f"{split}_mean_set_size": round(float(conformal_sets.set_sizes(probs, rule).mean()), 6),
    }


def prediction_sets_report(
    net: nn.Module, spec: InputSpec, split: Split, name: str, batch_size: int = 256
) -> dict[str, float]:
    """Coverage and mean size of the prediction sets ``spec`` carries on ``split`` (images as
    predict sees them: the spec's preprocessing and TTA), keys prefixed ``name``; ``{}`` when
    the model has no conformal rule. ``eval`` reports it for the split it evaluates."""
    if spec.decision.conformal is None or len(split) == 0:
        return {}
    logits = Predictor(net.eval(), spec).image_logits(split.images, batch_size)
    return _measure_sets(name, spec, logits, split.labels)


def _plain(temperature: Any) -> float | list[float]:
    return temperature if isinstance(temperature, (int, float)) else list(temperature)


def update_checkpoint(source: str | Path, target: str | Path, updates: dict[str, Any]) -> Path:
    """``source``'s checkpoint with ``updates`` (``Calibration.spec_updates``) in its task's
    hyper-parameters (``hparams["task"]``; an older checkpoint's flat layout moves there too), written to ``target``
    through a temp file and an atomic rename (``target`` may be ``source``: replaced whole or
    not at all, never half-written). Read with ``weights_only=True``: no code runs."""
    import torch

    from lightning_cls.fileio import atomic_path

    source, target = Path(source), Path(target)
    checkpoint = torch.load(source, map_location="cpu", weights_only=True)
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ValueError(f"{source} is not a Lightning checkpoint (no state_dict inside).")
    from lightning_cls.training.tasks import checkpoint_task
    from lightning_cls.training.tasks.base import FLAT_OPTIONS

    hparams = checkpoint.setdefault("hyper_parameters", {})
    ours = {k: v for k, v in updates.items() if k in FLAT_OPTIONS}  # the task's: calibration
    task = {**checkpoint_task(hparams), **ours}
    for key in FLAT_OPTIONS:  # an older checkpoint's flat options: now in the task's mapping
        hparams.pop(key, None)
    hparams.update({k: v for k, v in updates.items() if k not in ours})  # e.g. mean/std
    hparams["task"] = {k: v for k, v in task.items() if v is not None or k in ours}
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        torch.save(checkpoint, tmp)
    verb = "Replaced" if target.resolve() == source.resolve() else "Wrote"
    log.info("%s %s (atomically) with the calibration: %s", verb, target, updates)
    return target


# Moved to training/temperature.py; still importable from here (imported on first use: torch).
_MOVED = ("BINS", "binned_ece", "expected_calibration_error", "fit_temperature", "rescale_for_ece")


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        from lightning_cls.training import temperature

        return getattr(temperature, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
