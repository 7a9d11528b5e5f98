"""Issue 51's mutation pass over conformal.py: RAPS's own choice of ``k_reg`` and ``lam`` on
the tuning images (Angelopoulos et al. 2021), checked against their definitions; the coverage
tests in test_conformal.py pass whichever ``k_reg`` and ``lam`` are chosen (the guarantee holds
for any fixed pair), so a wrong choice only shows here."""

from __future__ import annotations

import math

import numpy as np

from lightning_cls.inference import conformal as cp

ALPHA = 0.1


def weak_probs(n: int = 600, classes: int = 10, seed: int = 0):
    """Probabilities of a ~50%-accurate model and labels drawn so: true ranks spread over 1..K."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    logits = rng.normal(size=(n, classes)) * 1.5
    logits[np.arange(n), labels] += 1.2
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    return probs, labels


def true_ranks(probs, labels):
    order = np.argsort(-probs, axis=1, kind="stable")
    return np.argmax(order == labels[:, None], axis=1) + 1  # 1-based


def test_k_reg_is_the_1_minus_alpha_quantile_of_the_true_label_rank():
    probs, labels = weak_probs()
    k_reg, _ = cp._tune(probs, labels, ALPHA)
    ranks = true_ranks(probs, labels)
    assert ranks.min() == 1 and ranks.max() >= 8  # ranks spread: the quantile is not trivial
    # The smallest rank r with at least 1 - alpha of the images ranked <= r.
    assert (ranks <= k_reg).mean() >= 1 - ALPHA
    assert (ranks <= k_reg - 1).mean() < 1 - ALPHA


def test_lam_is_the_one_of_the_grid_with_the_smallest_mean_set():
    probs, labels = weak_probs()
    k_reg, lam = cp._tune(probs, labels, ALPHA)
    n = len(labels)
    mean_size = {}
    for candidate in cp.LAMBDAS:
        scores = np.sort(cp.true_scores(probs, labels, candidate, k_reg))
        qhat = scores[min(math.ceil((n + 1) * (1 - ALPHA)), n) - 1]
        params = {"qhat": qhat, "lam": candidate, "k_reg": k_reg}
        mean_size[candidate] = cp.set_sizes(probs, params).mean()
    assert max(mean_size.values()) > min(mean_size.values()) + 0.05  # the choice matters here
    assert mean_size[lam] == min(mean_size.values()), mean_size


def test_raps_fit_records_the_tuned_pair_and_beats_the_worst_lam():
    """Through ``fit``: the fitted sets are no larger on average than with the grid's worst
    ``lam`` at the same ``k_reg``."""
    probs, labels = weak_probs(900)
    params = cp.fit(probs, labels, ALPHA, "raps")
    assert params["lam"] in cp.LAMBDAS and params["images"] == 630
    ranks = true_ranks(probs, labels)
    assert 1 <= params["k_reg"] < ranks.max()  # a quantile, not the largest rank
    mine = cp.set_sizes(probs, params).mean()
    for lam in cp.LAMBDAS:
        other = cp.fit(probs, labels, ALPHA, "raps", lam=lam, k_reg=params["k_reg"])
        assert mine <= cp.set_sizes(probs, other).mean() + 0.25
