"""Prediction sets with a finite-sample coverage guarantee (split conformal prediction).

A set of labels per image such that the true label is in it for at least ``1 - alpha`` of
images drawn like the calibration (validation) images, whatever the model: APS (Romano et al.
2020, "Classification with Valid and Adaptive Coverage") and RAPS (Angelopoulos et al. 2021,
"Uncertainty Sets for Image Classifiers using Conformal Prediction").

- **Score.** Rank the classes by probability (after the model's temperature); the score of
  class ``y`` is the probability mass of the classes ranked above ``y`` plus half of ``y``'s
  own, plus RAPS's penalty ``lam * max(0, rank(y) - k_reg)`` (rank 1 = most probable; APS:
  ``lam = 0``). This is the papers' randomised score with its uniform ``u`` fixed at its mean
  1/2: **deterministic**, so the same image always gets the same set (tests and users can
  reproduce it), and still valid, since split conformal needs exchangeable scores, not
  random ones. Measured against the papers' non-randomised score (the mass up to and
  including ``y``), it does not pile ties at 1.0 nor leave the sets of confident images empty:
  on a 60%-accurate model it covered 0.91 with 3.1 labels a set where that one covered 0.94
  with 3.9 (``tests/training/test_conformal_calibration.py``'s model, alpha 0.1).
- **Fit.** ``qhat`` is the ``ceil((n + 1)(1 - alpha))``-th smallest of the ``n`` calibration
  images' true-label scores (the finite-sample corrected quantile). Then, for a new image
  exchangeable with them, ``P(score(true label) <= qhat) >= 1 - alpha``, and (the scores being
  continuous, so without ties) ``<= 1 - alpha + 1 / (n + 1)``.
- **Set.** Every class whose score is ``<= qhat`` (a prefix of the ranking: the score grows with
  the rank), and never empty: the most probable class is always in, as RAPS's reference code
  does by default (``allow_zero_sets=False``). That only adds labels, so the lower bound
  holds; it adds one only where half the top probability exceeds ``qhat``, which happens
  when the model's accuracy is above ``1 - alpha`` (it then covers at its accuracy).
- **RAPS's ``k_reg`` and ``lam``** are chosen as the paper does when not given: on a random
  ``TUNE_SHARE`` of the calibration images (seeded), ``k_reg`` is the ``1 - alpha`` quantile of
  the true label's rank and ``lam`` the value of ``LAMBDAS`` giving the smallest mean set;
  ``qhat`` is then fitted on the other images only, so the guarantee stands.

Sets are for single-label (multi-class) models; a multi-label model is refused. The fitted
parameters (``{"method", "alpha", "qhat", "lam", "k_reg", "images"}``) travel in the
``InputSpec`` as ``conformal``. numpy only: ONNX/OpenVINO predict and serve never import torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

METHODS = ("aps", "raps")
DEFAULT_METHOD = "raps"
LAMBDAS = (0.001, 0.01, 0.1, 0.2, 0.5)  # the paper's grid for lam (``pick_lamda_size``)
TUNE_SHARE = 0.3  # the paper's ``pct_paramtune``: calibration images that choose k_reg, lam
KEYS = ("method", "alpha", "qhat", "lam", "k_reg", "images")


def check_alpha(alpha: Any) -> float:
    """The miscoverage ``alpha``, a number strictly between 0 and 1."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise ValueError(
            f"conformal={alpha!r} is not a number; give the share of images whose set may miss "
            "the true label, strictly between 0 and 1 (conformal=0.1: 90% coverage)."
        )
    if not 0 < alpha < 1:
        raise ValueError(
            f"conformal={alpha!r} is not strictly between 0 and 1; give the share of images "
            "whose set may miss the true label (conformal=0.1: 90% coverage)."
        )
    return float(alpha)


def check_method(method: Any) -> str:
    if method not in METHODS:
        import difflib

        close = difflib.get_close_matches(str(method), METHODS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(
            f"conformal_method={method!r} is not a known prediction-set method{hint}; use "
            f"{' or '.join(METHODS)}."
        )
    return str(method)


def check_options(alpha: Any, method: Any = DEFAULT_METHOD) -> None:
    """The command line's ``conformal`` (None: off) and ``conformal_method``, checked before
    any work starts: one ``ValueError`` naming the value and the fix."""
    if alpha is not None:
        check_alpha(alpha)
        check_method(method)


def refuse_multilabel(multi_hot: bool) -> None:
    if multi_hot:
        raise ValueError(
            "conformal=... gives prediction sets for single-label models, and this model is "
            "multi-label (each label is already its own yes/no); drop conformal=."
        )


def check_conformal(value: Any, multi_hot: bool = False) -> dict[str, Any] | None:
    """None, or fitted parameters ``fit`` returns, checked (an artifact's spec on load)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(
            f"conformal={value!r} is not a fitted prediction-set rule; give a mapping "
            f"{{{', '.join(KEYS)}}} (fit it: python -m lightning_cls.calibrate conformal=0.1) "
            "or null."
        )
    unknown = sorted(set(value) - set(KEYS))
    if unknown:
        raise ValueError(f"conformal has unknown key(s) {unknown}; known: {list(KEYS)}.")
    refuse_multilabel(multi_hot)
    method = check_method(value.get("method"))
    alpha = check_alpha(value.get("alpha"))
    numbers = {}
    for key in ("qhat", "lam"):
        number = value.get(key, 0.0 if key == "lam" else None)
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ValueError(f"conformal.{key}={number!r} is not a number.")
        if not math.isfinite(number) or number < 0:
            raise ValueError(f"conformal.{key}={number!r} is not a finite number >= 0.")
        numbers[key] = float(number)
    integers = {}
    for key in ("k_reg", "images"):
        number = value.get(key, 0)
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise ValueError(f"conformal.{key}={number!r} is not an integer >= 0.")
        integers[key] = number
    return {"method": method, "alpha": alpha, **numbers, **integers}


def ranked_scores(probs: np.ndarray, lam: float, k_reg: int) -> tuple[np.ndarray, np.ndarray]:
    """(N, K) probabilities -> (order, scores), each (N, K): the classes most probable first
    (a stable sort: ties by class index) and the score of the class at each rank: the mass
    ranked above it, half its own, plus ``lam * max(0, rank - k_reg)``; increasing along a row."""
    probs = np.asarray(probs, np.float64)
    if probs.ndim != 2:
        raise ValueError(f"probabilities must be (N, classes), got shape {probs.shape}.")
    order = np.argsort(-probs, axis=1, kind="stable")  # (N, K)
    ranked = np.take_along_axis(probs, order, axis=1)  # (N, K) most probable first
    mass = np.cumsum(ranked, axis=1) - 0.5 * ranked  # (N, K) the mass before, half its own
    rank = np.arange(1, probs.shape[1] + 1)  # (K,) 1 = most probable
    return order, mass + lam * np.maximum(0, rank - k_reg)


def true_scores(probs: np.ndarray, labels: np.ndarray, lam: float, k_reg: int) -> np.ndarray:
    """(N,) the conformity score of each image's true label (lower = more conforming)."""
    order, scores = ranked_scores(probs, lam, k_reg)
    rank = np.argmax(order == labels[:, None], axis=1)  # (N,) 0-based rank of the label
    return scores[np.arange(len(labels)), rank]


def conformal_quantile(scores: np.ndarray, alpha: float) -> float:
    """The ``ceil((n + 1)(1 - alpha))``-th smallest of ``n`` scores: a new exchangeable score
    is at most it with probability >= ``1 - alpha``. Too few scores for that rank: an error."""
    n = len(scores)
    rank = math.ceil((n + 1) * (1 - alpha))
    if rank > n:
        need = math.ceil((1 - alpha) / alpha)
        raise ValueError(
            f"conformal={alpha:g} needs at least {need} calibration images (the "
            f"ceil((n+1)(1-alpha))-th score must exist), got {n}; give a larger conformal= "
            "(alpha) or more validation images."
        )
    return float(np.sort(scores)[rank - 1])


def fit(
    probs: np.ndarray,
    labels: np.ndarray | Sequence[int],
    alpha: float,
    method: str = DEFAULT_METHOD,
    lam: float | None = None,
    k_reg: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Fit on calibration probabilities (N, K) (after the temperature) and their true class
    indices (N,): the parameters ``prediction_sets`` takes (see the module docstring)."""
    alpha, method = check_alpha(alpha), check_method(method)
    probs, labels = np.asarray(probs, np.float64), np.asarray(labels)
    refuse_multilabel(labels.ndim == 2)
    if probs.ndim != 2 or labels.shape != (len(probs),):
        raise ValueError(
            f"conformal fit takes probabilities (N, classes) and labels (N,), got "
            f"{probs.shape} and {labels.shape}."
        )
    labels, total, note = labels.astype(np.int64), len(labels), ""
    if method == "aps":
        lam, k_reg = 0.0, 0
    elif lam is None or k_reg is None:  # the paper's choice, on images the quantile won't see
        tune = np.random.default_rng(seed).permutation(len(labels))
        cut = int(round(TUNE_SHARE * len(labels)))
        tune, rest = tune[:cut], tune[cut:]
        chosen_k, chosen_lam = _tune(probs[tune], labels[tune], alpha)
        k_reg = chosen_k if k_reg is None else k_reg
        lam = chosen_lam if lam is None else lam
        probs, labels = probs[rest], labels[rest]
        note = f" RAPS chose k_reg and lam on {cut} of the {total}; conformal_method=aps uses all."
    try:
        qhat = conformal_quantile(true_scores(probs, labels, lam, k_reg), alpha)
    except ValueError as err:
        raise ValueError(f"{err}{note}") from None
    return check_conformal(
        dict(method=method, alpha=alpha, qhat=qhat, lam=float(lam), k_reg=int(k_reg),
             images=len(labels))
    )  # fmt: skip


def _tune(probs: np.ndarray, labels: np.ndarray, alpha: float) -> tuple[int, float]:
    """RAPS's ``k_reg`` (the ``1 - alpha`` quantile of the true label's rank, 1-based) and the
    ``lam`` of ``LAMBDAS`` with the smallest mean set on these images (Angelopoulos et al.)."""
    if len(labels) == 0:
        return 1, LAMBDAS[0]
    order = np.argsort(-probs, axis=1, kind="stable")
    ranks = np.argmax(order == labels[:, None], axis=1) + 1  # (N,) 1-based
    k_reg = int(np.quantile(ranks, 1 - alpha, method="higher"))
    sizes = []
    for lam in LAMBDAS:
        scores = np.sort(true_scores(probs, labels, lam, k_reg))
        rank = min(math.ceil((len(scores) + 1) * (1 - alpha)), len(scores))  # tuning only
        params = {"qhat": scores[rank - 1], "lam": lam, "k_reg": k_reg}
        sizes.append(set_sizes(probs, params).mean())
    return k_reg, LAMBDAS[int(np.argmin(sizes))]


def set_sizes(probs: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
    """(N,) how many classes each image's set holds (>= 1)."""
    return _sized(probs, params)[1]


def prediction_sets(probs: np.ndarray, params: Mapping[str, Any]) -> list[list[int]]:
    """(N, K) probabilities (after the temperature) -> per image its set of class indices,
    most probable first; never empty."""
    order, sizes = _sized(probs, params)
    return [row[:n] for row, n in zip(order.tolist(), sizes.tolist())]


def _sized(probs: np.ndarray, params: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(order (N, K), sizes (N,)): the classes whose score is <= qhat are a prefix of the
    ranking (the score grows with the rank); the most probable class is always in."""
    order, scores = ranked_scores(probs, params["lam"], params["k_reg"])
    return order, np.maximum((scores <= params["qhat"]).sum(axis=1), 1)


def covered(probs: np.ndarray, labels, params: Mapping[str, Any]) -> np.ndarray:
    """(N,) bool: whether each image's set holds its true class index (vectorised: the label's
    rank is below the set's size)."""
    order, sizes = _sized(probs, params)
    labels = np.asarray(labels).astype(np.int64)  # (N,) class indices (a tensor too)
    rank = np.argmax(order == labels[:, None], axis=1)  # (N,) 0-based
    return rank < sizes
