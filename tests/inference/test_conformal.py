"""Prediction sets (``inference/conformal.py``): the coverage guarantee, checked where it is
exact (the mean over many random calibration/test splits of one probability matrix), a broken
quantile caught by the same check, the sets' shape, and one-line errors for bad values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lightning_cls.inference import InputSpec
from lightning_cls.inference import conformal as cp
from lightning_cls.inference.spec import SpecError

ALPHA = 0.1


@pytest.fixture(scope="module")
def weak_model() -> tuple[np.ndarray, np.ndarray]:
    """2,000 images' probabilities over 10 classes (softmax of random logits) and labels drawn
    from them: a calibrated but weak model (accuracy ~0.43), so no set is widened to its top
    class and the sets' coverage is exactly the conformal one."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2000, 10)) * 1.5
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)  # (N, K)
    labels = (rng.random(2000)[:, None] > np.cumsum(probs, 1)).sum(1)  # (N,) drawn from probs
    return probs, labels


def mean_coverage(probs, labels, n: int, splits: int, method: str, **fit) -> tuple:
    """(mean coverage over ``splits`` random splits into ``n`` calibration images and the rest
    as test, its standard error, the calibration images the quantile saw)."""
    rng = np.random.default_rng(1)
    covers = []
    for _ in range(splits):
        order = rng.permutation(len(labels))
        cal, test = order[:n], order[n:]
        params = cp.fit(probs[cal], labels[cal], ALPHA, method, **fit)
        covers.append(cp.covered(probs[test], labels[test], params).mean())
    return np.mean(covers), np.std(covers) / math.sqrt(splits), params["images"]


def guarantee_holds(mean: float, se: float, n: int) -> bool:
    """Split conformal: for each split, E[coverage] lies in [1 - alpha, 1 - alpha + 1/(n+1)]
    (continuous scores); the mean over splits estimates it within a few standard errors."""
    return 1 - ALPHA - 4 * se <= mean <= 1 - ALPHA + 1 / (n + 1) + 4 * se


@pytest.mark.parametrize(
    ("method", "n", "splits", "fit"),
    [
        ("aps", 50, 1500, {}),  # small n: the finite-sample correction matters (~0.02)
        ("raps", 50, 1500, {"lam": 0.1, "k_reg": 2}),
        ("aps", 500, 300, {}),
        ("raps", 500, 300, {}),  # k_reg, lam tuned on 30%: the quantile sees the other 350
    ],
)
def test_mean_coverage_is_within_the_finite_sample_bounds(weak_model, method, n, splits, fit):
    probs, labels = weak_model
    mean, se, images = mean_coverage(probs, labels, n, splits, method, **fit)
    assert se < 0.0015
    assert guarantee_holds(mean, se, images), (mean, se, images)


@pytest.mark.parametrize(
    ("name", "rank"),
    [  # the index into the sorted calibration scores, 1-based, of a broken quantile
        ("no finite-sample correction", lambda n, a: math.ceil(n * (1 - a))),
        ("the wrong tail", lambda n, a: max(1, math.floor((n + 1) * a))),
    ],
)
def test_a_broken_quantile_fails_the_same_check(weak_model, monkeypatch, name, rank):
    """Negative control: the check above is sharp enough to catch the usual mistakes."""
    probs, labels = weak_model

    def broken(scores, alpha):
        return float(np.sort(scores)[rank(len(scores), alpha) - 1])

    monkeypatch.setattr(cp, "conformal_quantile", broken)
    mean, se, images = mean_coverage(probs, labels, 50, 1500, "aps")
    assert not guarantee_holds(mean, se, images), (name, mean, se)


def test_sets_are_a_prefix_of_the_ranking_never_empty_and_deterministic(weak_model):
    probs, labels = weak_model
    params = cp.fit(probs[:500], labels[:500], ALPHA, "raps")
    assert params["method"] == "raps" and params["images"] == 350
    assert params["lam"] in cp.LAMBDAS and 1 <= params["k_reg"] <= 10
    sets = cp.prediction_sets(probs[500:], params)
    assert sets == cp.prediction_sets(probs[500:], params)  # no random tie-breaking
    assert cp.fit(probs[:500], labels[:500], ALPHA, "raps") == params  # seeded tuning split
    order = np.argsort(-probs[500:], axis=1, kind="stable")
    for members, ranked in zip(sets, order.tolist()):
        assert 1 <= len(members) and members == ranked[: len(members)]
    sizes = cp.set_sizes(probs[500:], params)
    assert sizes.tolist() == [len(s) for s in sets]
    # An over-confident image (one class near 1) gets one label even when qhat is below it.
    sure = np.array([[0.999, 0.0005, 0.0005]])
    assert cp.prediction_sets(sure, {"qhat": 0.4, "lam": 0.0, "k_reg": 0}) == [[0]]
    # Smaller alpha, larger sets.
    wider = cp.fit(probs[:500], labels[:500], 0.05, "aps")
    assert (
        cp.set_sizes(probs[500:], wider).mean()
        > cp.set_sizes(probs[500:], cp.fit(probs[:500], labels[:500], 0.2, "aps")).mean()
    )


@pytest.mark.parametrize(
    ("alpha", "method", "match"),
    [
        (0, "aps", r"conformal=0 is not strictly between 0 and 1; .* \(conformal=0.1: 90%"),
        (1.5, "aps", r"conformal=1.5 is not strictly between 0 and 1"),
        ("abc", "aps", r"conformal='abc' is not a number; give the share of images"),
        (True, "aps", r"conformal=True is not a number"),
        (0.1, "rasp", r"conformal_method='rasp' is not a known .* \(did you mean raps\?\); use aps or raps"),
    ],
)  # fmt: skip
def test_bad_options_are_one_line_errors(alpha, method, match):
    with pytest.raises(ValueError, match=match):
        cp.check_options(alpha, method)
    cp.check_options(None, "rasp")  # off: the method is not read


def test_too_few_calibration_images_and_multilabel_are_refused():
    probs = np.full((5, 3), 1 / 3)
    with pytest.raises(
        ValueError, match=r"conformal=0.1 needs at least 9 calibration images .* got 5"
    ):
        cp.fit(probs, np.zeros(5, int), 0.1, "aps")
    with pytest.raises(ValueError, match=r"single-label models, and this model is multi-label"):
        cp.fit(probs, np.zeros((5, 3)), 0.1, "aps")


BASE = dict(classes=["a", "b", "c"], mean=[0.5], std=[0.5], image_size=8, num_channels=1)
RULE = {"method": "aps", "alpha": 0.1, "qhat": 0.7, "lam": 0.0, "k_reg": 0, "images": 40}


def test_the_spec_carries_the_rule_and_older_specs_load_without_it():
    spec = InputSpec(**BASE, task={"conformal": RULE})
    assert (
        InputSpec.from_props(spec.to_props()).decision.conformal == RULE
    )  # the ONNX metadata form
    probs = np.array([[0.5, 0.2, 0.3], [0.1, 0.1, 0.8]], np.float32)
    assert spec.decision.sets(probs) == [[0, 2], [2]]
    old = InputSpec(**BASE)
    assert old.decision.conformal is None and old.decision.sets(probs) is None


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"conformal": {**RULE, "x": 1}}, r"conformal has unknown key\(s\) \['x'\]"),
        ({"conformal": {**RULE, "qhat": -1.0}}, r"conformal.qhat=-1.0 is not a finite number >= 0"),
        ({"conformal": {**RULE, "alpha": 2}}, r"conformal=2 is not strictly between 0 and 1"),
        ({"conformal": "yes"}, r"conformal='yes' is not a fitted prediction-set rule"),
        (
            {"conformal": RULE, "name": "multilabel"},
            r"prediction sets for single-label models, and this model is multi-label",
        ),
    ],
)
def test_bad_stored_rules_are_spec_errors(options, match):
    with pytest.raises(SpecError, match=match):
        InputSpec(**BASE, task=options)
