"""What a model's answers are worth: its temperature and its rejection rule.

Both are chosen on the validation split after training (``lightning_cls.training.calibration``)
and travel in the ``InputSpec`` (``temperature``, ``reject``), so every artifact carries them and
the task (``inference/tasks.py``) applies them wherever it answers: predict, the server, the page.

- **Temperature scaling** (Guo et al. 2017, "On Calibration of Modern Neural Networks"): the
  logits are divided by ``T`` before the softmax (multi-label: one ``T`` per label before its
  sigmoid). ``T > 1`` softens an over-confident model; the ranking, so the top-1 label, is
  unchanged. 1 (the default): probabilities as trained.
- **Rejection**: an image whose confidence score is below ``threshold`` is answered
  ``unknown`` (its probabilities are still given). The score is ``msp`` (maximum softmax
  probability, Hendrycks & Gimpel 2017; multi-label: the largest label probability) or
  ``energy`` (the negative free energy ``logsumexp(z / T)``, Liu et al. 2020; multi-label: the
  JointEnergy ``sum_k softplus(z_k / T_k)``, Wang et al. 2021). ``keep`` records the share of
  validation images the threshold keeps. None (the default): every image gets its label.

No torch import: ONNX and OpenVINO predict/serve compute these with numpy.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lightning_cls.inference.reject_rules import REJECT_RULES, RejectRule

log = logging.getLogger(__name__)

_WARNED: set[str] = set()
UNKNOWN = "unknown"  # the answer for an image below the rejection threshold


def check_temperature(value: Any, num_classes: int, per_label: bool) -> float | tuple[float, ...]:
    """A positive finite number (or, for a multi-label task, one per label); a ``ValueError``
    naming the bad value and the fix otherwise."""
    if isinstance(value, (str, bytes, bool)) or value is None:
        raise ValueError(f"temperature={value!r} is not a number; give a number > 0 (1: off).")
    if isinstance(value, (int, float)):
        values: list = [value]
    else:
        try:
            values = [float(v) for v in value]
        except (TypeError, ValueError):
            raise ValueError(
                f"temperature={value!r} is not a number or a list of numbers; give a number > 0."
            ) from None
        if not per_label:
            raise ValueError(
                f"temperature={list(values)} is a list, but a single-label model takes one "
                "number (the logits of all classes share it); give temperature=<number > 0>."
            )
        if len(values) != num_classes:
            raise ValueError(
                f"temperature has {len(values)} values but the model has {num_classes} labels; "
                "give one per label, or a single number."
            )
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(
            f"temperature={value!r} holds a value that is not a number > 0 (the logits are "
            "divided by it); give a positive number, 1 for none."
        )
    if isinstance(value, (int, float)):
        return float(value)
    return tuple(float(v) for v in values)


def check_reject(value: Any) -> dict[str, Any] | None:
    """None, or ``{"score": <a registered rule's name>, "threshold": float, "keep": float in
    (0, 1)}`` plus the rule's fitted state (its ``params``, checked by the rule)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(
            f"reject={value!r} is not a rejection rule; give a mapping {{score: "
            f"{'|'.join(REJECT_RULES)}, threshold: <number>, keep: <share in (0, 1)>}} or null."
        )
    score = check_score(value.get("score"))
    rule = REJECT_RULES.create(score)
    known = {"score", "threshold", "keep", *rule.params}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(
            f"reject has unknown key(s) {unknown} for score={score}; known: {sorted(known)}."
        )
    keep = check_keep(value.get("keep"))
    params = rule.check_params(value)
    threshold = value.get("threshold")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise ValueError(f"reject.threshold={threshold!r} is not a number.")
    if not math.isfinite(threshold):
        raise ValueError(f"reject.threshold={threshold!r} is not a finite number.")
    return {"score": score, "threshold": float(threshold), "keep": keep, **params}


TEMPERATURE_FITS = ("auto", "nll", "ece")  # how calibration fits T (training/calibration.py)


def check_temperature_fit(value: Any) -> str:
    """``temperature_fit``: ``nll`` (Guo et al.), ``ece`` (NLL's temperature, rescaled to the
    lowest validation ECE) or ``auto`` (``ece`` for a label-smoothed model, else ``nll``); a
    ``ValueError`` naming the value otherwise."""
    if not isinstance(value, str) or value not in TEMPERATURE_FITS:
        raise ValueError(
            f"temperature_fit={value!r} is not one of {', '.join(TEMPERATURE_FITS)}; "
            "temperature_fit=nll minimises the validation NLL, ece then rescales that "
            "temperature to the lowest validation ECE, auto (the default) picks ece for a model "
            "trained with label smoothing and nll otherwise."
        )
    return value


def check_score(score: Any) -> str:
    """A registered rule's name (``REJECT_RULES``); a ``ValueError`` with the closest otherwise."""
    if not isinstance(score, str) or score not in REJECT_RULES:
        import difflib

        known = list(REJECT_RULES)
        close = difflib.get_close_matches(str(score), known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(
            f"reject={score!r} is not a known rejection rule{hint}; use one of "
            f"{', '.join(known)} (or null: no rejection)."
        )
    return score


def rule_of(score: Any, **options: Any) -> RejectRule:
    """The rule registered as ``score`` (``REJECT_RULES``), checked by name first, built with
    its own ``options`` (which it checks); a ``ValueError`` naming an option it lacks."""
    builder = REJECT_RULES.get(check_score(score))
    try:
        return REJECT_RULES.create(score, **options)
    except TypeError as err:
        known = [
            name
            for name, p in inspect.signature(builder).parameters.items()
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        raise ValueError(
            f"reject={score} has no option among {sorted(options)} ({err}); its options: "
            f"{', '.join(known) or 'none'} (conf/reject/{score}.yaml)."
        ) from None


def rule_choice(reject: Any) -> tuple[str | None, dict[str, Any]]:
    """``reject`` as the config gives it: None, a rule's name, or its config group's mapping
    ``{name: <rule>, <option>: <value>, ...}`` (``conf/reject/<name>.yaml``, ``name: null``:
    none) -> (the name or None, the options)."""
    if reject is None or isinstance(reject, str):
        return reject, {}
    if isinstance(reject, Mapping):
        options = {str(key): reject[key] for key in reject}
        return options.pop("name", None), options
    raise ValueError(
        f"reject={reject!r} is not a rejection rule's name; give reject=<name> "
        f"({', '.join(REJECT_RULES)}) or reject=none."
    )


def build_rule(reject: Any) -> RejectRule | None:
    """The rule ``reject`` chooses (``rule_choice``), built with its options; None: none."""
    name, options = rule_choice(reject)
    return None if name is None else rule_of(name, **options)


def with_flat_options(reject: Any, flat: Mapping[str, Any]) -> Any:
    """``reject`` with the deprecated flat ``reject_<option>=<value>`` keys (``flat``: the
    config's keys and values; null: not given) merged into its options, with one deprecation
    line; a key the chosen rule does not take is ignored, as it always was."""
    name, options = rule_choice(reject)
    given = {
        key: value
        for key, value in flat.items()
        if key.startswith("reject_") and key != "reject_keep" and value is not None
    }
    if name is None or not given:
        return reject
    takes = inspect.signature(REJECT_RULES.get(check_score(name))).parameters
    for key, value in given.items():
        option = key.removeprefix("reject_")
        note = "" if option in takes else f" (ignored: reject={name} has no option {option})"
        message = f"{key}={value!r} is deprecated; write reject.{option}={value!r}{note}."
        if message not in _WARNED:  # once per process: train checks, then fits
            _WARNED.add(message)
            log.warning(message)
        if option in takes:
            options[option] = value
    return {"name": name, **options}


def reject_from_config(cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """The rejection rule a command's config chooses: ``{"name": <rule>, **its options}``
    (``cfg["reject"]``, the ``conf/reject/<name>.yaml`` group, with the deprecated flat
    ``reject_<option>`` keys merged in), or None."""
    reject = with_flat_options(
        cfg.get("reject"), {key: cfg.get(key) for key in cfg if str(key).startswith("reject_")}
    )
    name, options = rule_choice(reject)
    return None if name is None else {"name": name, **options}


def check_rule_options(reject: Any, keep: Any = 0.95) -> None:
    """The command line's rejection options (``reject`` with its own options, ``reject_keep``),
    checked before any work starts: one ``ValueError`` naming the value."""
    if build_rule(reject) is not None:
        check_keep(keep)


def check_keep(keep: Any) -> float:
    if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0 < keep < 1:
        raise ValueError(
            f"reject_keep={keep!r} is not a share strictly between 0 and 1; e.g. "
            "reject_keep=0.95 keeps 95% of the in-distribution validation images."
        )
    return float(keep)


def scaled(logits, temperature: float | Sequence[float]):
    """(B, K) logits / temperature (one number, or one per column), float32, same kind."""
    if isinstance(temperature, (int, float)) and temperature == 1:
        return logits
    if isinstance(logits, np.ndarray):
        return logits.astype(np.float32) / np.asarray(temperature, np.float32)
    import torch

    return logits.float() / torch.as_tensor(temperature, dtype=torch.float32, device=logits.device)


def logsumexp(x):
    """(B, K) -> (B,) ``log(sum(exp(x)))`` per row, stable, float32, same kind."""
    if not isinstance(x, np.ndarray):
        return x.float().logsumexp(1)
    top = x.max(axis=1, keepdims=True)
    return (top[:, 0] + np.log(np.exp(x - top).sum(axis=1))).astype(np.float32)


def softplus_sum(x):
    """(B, K) -> (B,) ``sum_k log(1 + exp(x_k))``, stable, float32, same kind."""
    if not isinstance(x, np.ndarray):
        import torch.nn.functional as F

        return F.softplus(x.float()).sum(1)
    return (np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))).sum(axis=1).astype(np.float32)


def quantile_threshold(scores: Sequence[float] | np.ndarray, keep: float) -> float:
    """The score threshold that keeps the ``keep`` share of ``scores`` (those >= it): their
    ``1 - keep`` quantile (numpy's linear interpolation)."""
    values = np.asarray(scores, np.float64).ravel()
    if values.size == 0:
        raise ValueError("Cannot choose a rejection threshold on an empty validation split.")
    return float(np.quantile(values, 1.0 - check_keep(keep)))
