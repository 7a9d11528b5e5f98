"""Calibration after training: the temperature and the rejection rule, chosen on validation.

``calibrate(net, spec, val, ...)`` runs the network over the validation images exactly as
predict does (``Predictor.image_logits``: the artifact's preprocessing and TTA), then

- fits the **temperature** (Guo et al. 2017): ``T = exp(t)`` minimising the negative
  log-likelihood of the validation labels, by L-BFGS on ``t`` (so ``T`` stays positive). A
  multi-label model gets one temperature per label on its binary cross-entropy: each label
  has its own sigmoid, and labels differ in how over-confident they are (the labels'
  losses are separable, so one L-BFGS over the vector fits each label's own).
  ``temperature_fit="ece"`` then multiplies that temperature by the one factor (a log grid
  from 1/4 to 4) that gives the lowest validation ECE: a model trained with label smoothing
  has a NLL-best ``T`` that leaves its confidence too low (measured on CIFAR-10 photos in
  docs/guides/calibration.md), so ``"auto"`` (the default) picks ``"ece"`` for such a model
  and ``"nll"`` for every other. Dividing logits
  by a positive ``T`` keeps their order, so the top-1 label (multi-class) and each label's
  ranking (multi-label mAP) do not change; a multi-label model's decision threshold, chosen
  on the uncalibrated probabilities, is chosen again on the calibrated ones unless it was
  fixed by the user (``choose_threshold=False``).
- chooses the **rejection threshold** (``reject="msp"|"energy"``): the ``1 - keep`` quantile
  of the validation images' confidence, so ``keep`` of them are answered and the rest
  ``unknown``.
- fits **prediction sets** (``conformal=alpha``, ``inference/conformal.py``: APS or RAPS) on
  the validation probabilities after the temperature, and reports their coverage and mean
  size on validation and the held-out split.

It reports the expected calibration error (torchmetrics, 15 equal-width bins; multi-label:
the binary ECE over every (image, label) probability) before and after, on validation and, when
given, on a held-out split, and draws a reliability diagram. The result's ``spec_updates``
(``temperature``, ``reject``, ``threshold``) are what the checkpoint's hyper-parameters and
every exported artifact's ``InputSpec`` carry from then on.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lightning_cls.inference import conformal as conformal_sets
from lightning_cls.inference import feature_rules
from lightning_cls.inference.predictor import Predictor
from lightning_cls.inference.spec import InputSpec, Split
from lightning_cls.inference.tasks import Task
from lightning_cls.inference.trust import (
    build_rule,
    check_keep,
    check_temperature_fit,
    quantile_threshold,
    rule_choice,
)

log = logging.getLogger(__name__)
BINS = 15  # reliability-diagram and ECE bins (Guo et al. use 15)
# Fewer validation images than this and calibrate fits anyway, with one warning. Below it the
# numbers it fits and reports are mostly noise: one image moves the ECE by 1/N (0.067 at 15
# images, with 15 bins of about one image each), the rejection threshold at keep=0.95 is the
# 5% quantile (fewer than 5 images below it), split conformal's quantile at alpha=0.1 rests on
# N/10 images, and a temperature fitted to a handful of confident hits runs off to T >> 1.
# 100 is where each of these rests on at least 5 images (ECE per image: 0.01).
MIN_VAL_IMAGES = 100


@dataclass
class Calibration:
    """What ``calibrate`` chose and measured; ``report()`` is the ``results.json`` entry."""

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


def calibrate(
    net: nn.Module,
    spec: InputSpec,
    val: Split,
    test: Split | None = None,
    temperature: bool | float = True,
    reject: str | Mapping[str, Any] | None = None,
    keep: float = 0.95,
    choose_threshold: bool = True,
    diagram: str | Path | None = None,
    batch_size: int = 256,
    train: Split | None = None,
    conformal: float | None = None,
    conformal_method: str = conformal_sets.DEFAULT_METHOD,
    temperature_fit: str = "auto",
) -> Calibration:
    """Fit the temperature (``temperature=False``: keep the spec's) and the rejection rule
    (``reject``: a registered rule's name, or ``{name: <rule>, **its options}`` as
    ``conf/reject/<name>.yaml`` gives it; None: none) on ``val``; measure on ``val`` and
    ``test``. The feature-space rules are fitted on ``train``'s features.
    ``conformal``: the miscoverage alpha of prediction sets fitted on ``val`` after the
    temperature (``conformal_method``: ``aps`` | ``raps``); None: none. ``temperature_fit``:
    ``nll`` | ``ece`` | ``auto`` (``ece`` for a label-smoothed model; module docstring)."""
    conformal_sets.check_options(conformal, conformal_method)
    objective = check_temperature_fit(temperature_fit)
    if objective == "auto":
        objective = "ece" if spec.label_smoothing > 0 else "nll"
    if conformal is not None:
        spec.decision.calibration.refuse_sets()  # InputSpec's own check
    rule_kind = build_rule(reject)
    reject = rule_choice(reject)[0]
    features_rule = rule_kind is not None and rule_kind.needs_features
    if reject is not None:
        check_keep(keep)
    if features_rule:
        if train is None or len(train) == 0:
            raise ValueError(
                f"reject={reject} is fitted on the training images' features, and no training "
                "images were given; calibrate with data that has a train split."
            )
        rule_kind.check_options(images=len(train))
    if len(val) == 0:
        raise ValueError("Calibration needs validation images, but the val split is empty.")
    warn_small_validation(len(val))
    base = replace(spec, temperature=1.0, reject=None)  # the network's own probabilities
    predictor = Predictor(net.eval(), base)
    base.decision.labels.check(val.labels, "calibration")
    outputs = predictor.image_features if features_rule else predictor.image_outputs
    logits, val_features = outputs(val.images, batch_size)  # (N, K) float32, (N, D) | None
    task = base.decision
    fit_report: dict[str, Any] = {}
    if temperature is True:
        fitted = fit_temperature(logits, val.labels, task)
        fit_report = {"temperature_fit": objective}
        if objective == "ece":
            fit_report["temperature_nll"] = fitted
            fitted = rescale_for_ece(logits, val.labels, task, fitted)
    elif temperature is False:
        fitted = spec.temperature
    else:  # a number the user set: used as given, measured like a fitted one
        fitted = task.calibration.check_temperature(temperature, spec.num_classes)
    calibrated = replace(base, temperature=_plain(fitted))
    threshold = None  # the task's own choice on the calibrated probabilities (if it has one)
    if choose_threshold:
        threshold = task.calibration.choose_threshold(
            calibrated.decision.probabilities(logits), val.labels
        )
    if threshold is not None:
        calibrated = replace(calibrated, threshold=threshold)
    rule = None
    if reject is not None:
        train_features = labels = None  # a logit rule stores its options alone
        if features_rule:
            _, train_features = predictor.image_features(train.images, batch_size)
            labels = train.labels
        params = rule_kind.fit(train_features, labels)
        fitted_rule = {"score": reject, "threshold": 0.0, "keep": keep, **params}
        calibrated = replace(calibrated, reject=fitted_rule)  # its threshold comes next
        scores = calibrated.decision.confidence(logits, features=val_features)
        rule = {**fitted_rule, "threshold": quantile_threshold(scores.numpy(), keep)}
        calibrated = replace(calibrated, reject=rule)
    if conformal is not None:  # on the probabilities after the temperature, as predict has them
        probs = calibrated.decision.probabilities(logits).numpy()
        fitted_sets = conformal_sets.fit(probs, val.labels.numpy(), conformal, conformal_method)
        calibrated = replace(calibrated, conformal=fitted_sets)
    metrics = {"split": "val", "images": len(val), "bins": BINS, **fit_report}
    metrics.update(_measure("val", base, calibrated, logits, val.labels))
    metrics.update(_measure_sets("val", calibrated, logits, val.labels))
    if test is not None and len(test):
        test_logits, test_features = outputs(test.images, batch_size)
        metrics.update(_measure("test", base, calibrated, test_logits, test.labels))
        metrics.update(_measure_sets("test", calibrated, test_logits, test.labels))
        if rule is not None:
            scores = calibrated.decision.confidence(test_logits, features=test_features)
            metrics["test_kept"] = round((scores >= rule["threshold"]).float().mean().item(), 6)
    if diagram is not None:
        probs = (base.decision.probabilities(logits), calibrated.decision.probabilities(logits))
        from lightning_cls.figures.calibration import reliability_diagram

        drawn = reliability_diagram(*probs, val.labels, task.calibration, diagram, BINS)
        metrics["reliability_diagram"] = str(drawn)
    result = Calibration(_plain(fitted), rule, threshold, metrics, calibrated.conformal)
    log.info("%s", result.summary())
    log.debug("Calibration (results.json's entry): %s", result.report())
    return result


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


def fit_temperature(
    logits: torch.Tensor, labels: torch.Tensor, task: Task, steps: int = 100
) -> float | list[float]:
    """The temperatures (``task.calibration.temperatures``: one, or one per label) minimising the task's
    NLL of ``labels`` given ``logits / T`` (``task.calibration.nll``), by L-BFGS on ``log T``. Returns a
    plain float, or a list of them when there are several."""
    logits = logits.detach().float()
    width = task.calibration.temperatures(logits.shape[1])
    log_t = torch.zeros(width, requires_grad=True)
    optimizer = torch.optim.LBFGS([log_t], lr=0.5, max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = task.calibration.nll(logits / log_t.exp(), labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    temperatures = log_t.detach().exp().clamp(1e-2, 1e2).tolist()
    if not all(math.isfinite(t) for t in temperatures):
        raise ValueError("Temperature scaling diverged (non-finite logits on validation?).")
    return [round(t, 6) for t in temperatures] if width > 1 else round(temperatures[0], 6)


def rescale_for_ece(
    logits: torch.Tensor,
    labels: torch.Tensor,
    task: Task,
    temperature: float | list[float],
    span: float = 4.0,
    points: int = 401,
) -> float | list[float]:
    """``temperature`` (one, or one per label) times the factor in ``[1/span, span]`` (a log
    grid of ``points``) whose probabilities have the lowest ECE on ``labels``, averaged over
    10 to 20 equal-width bins (one bin count's ECE jumps as images cross bin edges, and its
    minimum moves with them); among equal ECEs the factor nearest 1. ``task`` is the
    uncalibrated one (temperature 1)."""
    logits = logits.detach().float()
    base = torch.as_tensor(temperature, dtype=torch.float32)
    factors = torch.logspace(-math.log10(span), math.log10(span), points).tolist()

    def error(factor: float) -> float:
        probs = task.probabilities(logits / (base * factor))
        confidence, correct = task.calibration.reliability(probs, labels)
        return sum(binned_ece(confidence, correct, bins) for bins in range(10, 21)) / 11

    best = min(factors, key=lambda f: (round(error(f), 9), abs(math.log(f))))
    scaled = (base * best).clamp(1e-2, 1e2).tolist()
    return [round(t, 6) for t in scaled] if isinstance(scaled, list) else round(scaled, 6)


def binned_ece(confidence: torch.Tensor, correct: torch.Tensor, bins: int) -> float:
    """The L1 ECE of (confidence, correct) pairs in ``bins`` equal-width bins, binned as
    torchmetrics bins (``expected_calibration_error``), without its per-call overhead."""
    confidence, correct = confidence.double(), correct.double()
    edges = torch.linspace(0, 1, bins + 1, dtype=torch.float64)
    index = (torch.bucketize(confidence, edges, right=True) - 1).clamp(0, bins - 1)
    gap = torch.zeros(bins, dtype=torch.float64).index_add_(0, index, correct - confidence)
    return (gap.abs().sum() / max(len(confidence), 1)).item()


def expected_calibration_error(probs: torch.Tensor, labels: torch.Tensor, task: Task) -> float:
    """ECE (torchmetrics, ``BINS`` equal-width bins, L1) as ``task`` measures it
    (``task.calibration.calibration_error``: multi-class on the top-1 confidence, multi-label over every
    (image, label) probability)."""
    return task.calibration.calibration_error(probs, labels, BINS)


def _measure(split, base: InputSpec, calibrated: InputSpec, logits, labels) -> dict[str, float]:
    """ECE, NLL and the task's score on ``split`` before and after calibration."""
    out = {}
    for when, spec in (("before", base), ("after", calibrated)):
        probs = spec.decision.probabilities(logits)
        scaled = logits / torch.as_tensor(spec.temperature, dtype=torch.float32)
        task = spec.decision
        out[f"{split}_ece_{when}"] = round(expected_calibration_error(probs, labels, task), 6)
        out[f"{split}_nll_{when}"] = round(task.calibration.nll(scaled, labels).item(), 6)
        out[f"{split}_{spec.decision.score_name}_{when}"] = round(
            spec.decision.score(probs, labels), 6
        )
    return out


def _measure_sets(split: str, calibrated: InputSpec, logits, labels) -> dict[str, float]:
    """The prediction sets' coverage (share holding the true label) and mean size on
    ``split``; nothing without a conformal rule. On ``val`` they are in-sample (fitted there)."""
    rule = calibrated.conformal
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
    if spec.conformal is None or len(split) == 0:
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
