"""Open-set metrics: how well a confidence score tells known images from unknown ones.

Small pure numpy functions over 1-D arrays. Convention everywhere: a higher score means "more
known" (the model's confidence, e.g. the top-1 probability or minus the energy), and an image
is accepted (answered with a label) when its score is at or above the threshold, as the
rejection rules of ``inference.reject_rules`` decide. Tied scores are one threshold: no
metric depends on the order of equal scores.

- ``auroc``: P(known score > unknown score), ties counting half (Mann-Whitney).
- ``fpr_at_tpr``: the share of unknowns accepted at the threshold that keeps 95% of knowns.
- ``aupr_unknown``: average precision of detecting unknowns (AUPR-Out: unknowns are the
  positives, ranked by minus the score), the step-wise sum of sklearn's
  ``average_precision_score``; chance is the share of unknowns.
- ``oscr``: area under correct-classification rate of the knowns against false-positive rate
  of the unknowns, sweeping the threshold (Dhamija et al., NeurIPS 2018; Vaze et al., ICLR
  2022); equals the closed-set accuracy for a perfect detector.
- ``aurc``: area under the selective risk-coverage curve of the knowns (Geifman et al., ICLR
  2019): the mean over coverages k/n of the error rate among the k most confident.
"""

from __future__ import annotations

import numpy as np

__all__ = ["accepted_share", "aupr_unknown", "aurc", "auroc", "fpr_at_tpr", "oscr"]


def _scores(values, name: str) -> np.ndarray:
    scores = np.asarray(values, dtype=np.float64).ravel()
    if scores.size == 0:
        raise ValueError(f"{name} is empty; open-set metrics need at least one score in it.")
    if not np.isfinite(scores).all():
        raise ValueError(f"{name} holds NaN or infinite scores; every score must be finite.")
    return scores


def auroc(known, unknown) -> float:
    """P(a known image scores above an unknown one), ties counting half; 1: perfect, 0.5: chance."""
    known, unknown = _scores(known, "known"), np.sort(_scores(unknown, "unknown"))
    below = np.searchsorted(unknown, known, side="left")  # (N,) unknowns strictly lower
    tied = np.searchsorted(unknown, known, side="right") - below  # (N,)
    return float((below + 0.5 * tied).sum() / (known.size * unknown.size))


def fpr_at_tpr(known, unknown, tpr: float = 0.95) -> float:
    """The share of unknowns accepted at the highest threshold that still accepts ``tpr`` of
    the knowns (FPR95 at the default); 0: perfect, lower is better."""
    known, unknown = np.sort(_scores(known, "known")), _scores(unknown, "unknown")
    # the threshold is the known score with at least ceil(tpr * N) knowns at or above it
    threshold = known[known.size - int(np.ceil(tpr * known.size - 1e-9))]
    return accepted_share(unknown, threshold)


def accepted_share(unknown, threshold: float) -> float:
    """The share of ``unknown`` scores at or above ``threshold``: unknowns given a label."""
    return float((_scores(unknown, "unknown") >= threshold).mean())


def aupr_unknown(known, unknown) -> float:
    """Average precision with the unknowns as positives, ranked by minus the score
    (AUPR-Out): sum over thresholds of (recall step) x precision, as sklearn's
    ``average_precision_score`` (no interpolation). Chance: the share of unknowns."""
    known, unknown = _scores(known, "known"), _scores(unknown, "unknown")
    flagged = -np.r_[unknown, known]  # (M + N,) higher: more surely unknown
    positive = np.r_[np.ones(unknown.size), np.zeros(known.size)]
    order = np.argsort(-flagged, kind="stable")
    flagged, positive = flagged[order], positive[order]
    last = np.r_[np.flatnonzero(np.diff(flagged)), flagged.size - 1]  # end of each tie group
    tp = np.cumsum(positive)[last]
    precision = tp / (last + 1)
    recall_step = np.diff(np.r_[0.0, tp]) / unknown.size
    return float((recall_step * precision).sum())


def _accepted_counts(threshold_scores: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """For each threshold, how many of ``scores`` are at or above it."""
    ranked = np.sort(scores)
    return scores.size - np.searchsorted(ranked, threshold_scores, side="left")


def oscr_curve(known, correct, unknown) -> tuple[np.ndarray, np.ndarray]:
    """(false-positive rate of unknowns, correct-classification rate of knowns), one point
    per distinct threshold from accepting nothing (0, 0) to accepting all (1, accuracy)."""
    known, unknown = _scores(known, "known"), _scores(unknown, "unknown")
    correct = _correct(correct, known)
    thresholds = np.unique(np.r_[known, unknown])[::-1]  # high to low: the curve runs up
    fpr = _accepted_counts(thresholds, unknown) / unknown.size
    ccr = _accepted_counts(thresholds, known[correct]) / known.size
    return np.r_[0.0, fpr], np.r_[0.0, ccr]


def oscr(known, correct, unknown) -> float:
    """Open-set classification rate: the area under ``oscr_curve`` (trapezoids). Equals the
    closed-set accuracy when every known scores above every unknown; 0 for no right answer."""
    fpr, ccr = oscr_curve(known, correct, unknown)
    return float(np.sum(np.diff(fpr) * (ccr[1:] + ccr[:-1]) / 2))


def risk_coverage_curve(known, correct) -> tuple[np.ndarray, np.ndarray]:
    """(coverage k/n, selective risk: the error rate of the k most confident knowns) for
    k = 1..n; tied scores share their group's risk (the order of equal scores does not count)."""
    known = _scores(known, "known")
    correct = _correct(correct, known)
    order = np.argsort(-known, kind="stable")
    errors = np.cumsum(~correct[order])  # (N,) errors among the k most confident
    ranked = known[order]
    group_end = np.r_[np.flatnonzero(np.diff(ranked)), ranked.size - 1]
    end_of = np.repeat(group_end, np.diff(np.r_[-1, group_end]))  # (N,) each one's group end
    risk = errors[end_of] / (end_of + 1)
    coverage = np.arange(1, known.size + 1) / known.size
    return coverage, risk


def aurc(known, correct) -> float:
    """Area under the risk-coverage curve: the mean selective risk over coverages 1/n..1
    (Geifman et al.'s discrete form). 0: every accepted answer right at every coverage; a
    score that ranks errors first is worse than one that ranks them last; lower is better."""
    return float(risk_coverage_curve(known, correct)[1].mean())


def _correct(correct, known: np.ndarray) -> np.ndarray:
    correct = np.asarray(correct).ravel().astype(bool)
    if correct.shape != known.shape:
        raise ValueError(
            f"correct has {correct.size} entries but known has {known.size} scores; pass one "
            "right/wrong flag per known image."
        )
    return correct
