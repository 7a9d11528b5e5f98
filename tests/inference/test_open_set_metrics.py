"""Open-set metrics (inference/open_set.py): AUROC, FPR95, AUPR-Out, OSCR and AURC on inputs
computed by hand, at their limits (perfect, chance), and against sklearn where it has them."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_cls.inference.open_set import (
    accepted_share,
    aupr_unknown,
    aurc,
    auroc,
    fpr_at_tpr,
    oscr,
    oscr_curve,
    risk_coverage_curve,
)

# Two knowns (0.9 misclassified, 0.6 right) and two unknowns (0.7, 0.2).
KNOWN, CORRECT, UNKNOWN = [0.9, 0.6], [False, True], [0.7, 0.2]


def test_a_four_image_case_computed_by_hand():
    assert auroc(KNOWN, UNKNOWN) == 0.75  # of 4 pairs, only (0.6, 0.7) is ranked wrong
    # unknowns ranked by -score: 0.2 (U, P=1, R=1/2), 0.6 (K), 0.7 (U, P=2/3, R=1)
    assert aupr_unknown(KNOWN, UNKNOWN) == pytest.approx(0.5 * 1 + 0.5 * 2 / 3)
    # thresholds 0.9, 0.7, 0.6, 0.2 -> (FPR, CCR): (0, 0), (1/2, 0), (1/2, 1/2), (1, 1/2)
    fpr, ccr = oscr_curve(KNOWN, CORRECT, UNKNOWN)
    assert fpr.tolist() == [0, 0, 0.5, 0.5, 1] and ccr.tolist() == [0, 0, 0, 0.5, 0.5]
    assert oscr(KNOWN, CORRECT, UNKNOWN) == 0.25  # not the accuracy, 0.5
    # coverage 1/2: the wrong 0.9 alone (risk 1); coverage 1: one of two wrong
    coverage, risk = risk_coverage_curve(KNOWN, CORRECT)
    assert coverage.tolist() == [0.5, 1.0] and risk.tolist() == [1.0, 0.5]
    assert aurc(KNOWN, CORRECT) == 0.75
    assert aurc([-s for s in KNOWN], CORRECT) == 0.25  # a flipped sign ranks the error last
    # 95% of two knowns is both: threshold 0.6 accepts the unknown 0.7
    assert fpr_at_tpr(KNOWN, UNKNOWN) == 0.5
    assert accepted_share(UNKNOWN, 0.65) == 0.5 and accepted_share(UNKNOWN, 0.8) == 0.0


def test_perfect_separation_and_chance():
    g = np.random.default_rng(0)
    known, unknown = g.uniform(0.6, 1.0, 400), g.uniform(0.0, 0.5, 300)
    correct = g.random(400) < 0.8
    assert auroc(known, unknown) == 1.0 and fpr_at_tpr(known, unknown) == 0.0
    assert aupr_unknown(known, unknown) == 1.0
    assert oscr(known, correct, unknown) == pytest.approx(correct.mean())  # = accuracy
    assert oscr(known, np.ones(400, bool), unknown) == 1.0
    assert aurc(known, np.ones(400, bool)) == 0.0
    known, unknown = g.random(4000), g.random(3000)  # one distribution: chance
    assert auroc(known, unknown) == pytest.approx(0.5, abs=0.02)
    assert fpr_at_tpr(known, unknown) == pytest.approx(0.95, abs=0.02)
    assert aupr_unknown(known, unknown) == pytest.approx(3 / 7, abs=0.02)  # share of unknowns
    correct = g.random(4000) < 0.8
    # OSCR: accuracy x AUROC when the score knows nothing; AURC: the error rate at every coverage
    assert oscr(known, correct, unknown) == pytest.approx(0.5 * correct.mean(), abs=0.02)
    assert aurc(known, correct) == pytest.approx(1 - correct.mean(), abs=0.02)


def test_a_score_that_ranks_errors_last_has_the_lower_aurc():
    g = np.random.default_rng(1)
    correct = g.random(500) < 0.7
    informative = correct + g.normal(0, 0.5, 500)  # right answers score higher
    assert aurc(informative, correct) < 0.15 < 0.3 < aurc(-informative, correct)
    # the error rate at full coverage is the last point whatever the order
    assert risk_coverage_curve(informative, correct)[1][-1] == pytest.approx(1 - correct.mean())


def test_agrees_with_sklearn_with_ties():
    from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

    g = np.random.default_rng(2)
    known = np.round(g.normal(1, 1, 300), 1)  # rounded: many ties, within and across sets
    unknown = np.round(g.normal(0, 1, 200), 1)
    truth = np.r_[np.ones(300), np.zeros(200)]
    scores = np.r_[known, unknown]
    assert auroc(known, unknown) == pytest.approx(roc_auc_score(truth, scores), abs=1e-12)
    ap = average_precision_score(1 - truth, -scores)  # unknowns positive, ranked by -score
    assert aupr_unknown(known, unknown) == pytest.approx(ap, abs=1e-12)
    # OSCR with every known right is the ROC AUC (the same curve)
    assert oscr(known, np.ones(300, bool), unknown) == pytest.approx(auroc(known, unknown))
    fpr, tpr, _ = roc_curve(truth, scores)
    assert fpr_at_tpr(known, unknown) == pytest.approx(fpr[np.argmax(tpr >= 0.95)])


def test_ties_do_not_depend_on_order():
    known, correct = np.array([0.5, 0.5, 0.9]), np.array([True, False, True])
    risk = risk_coverage_curve(known, correct)[1]
    assert risk.tolist() == [0.0, 1 / 3, 1 / 3]
    assert risk.tolist() == risk_coverage_curve(known[[0, 2, 1]], correct[[0, 2, 1]])[1].tolist()


def test_bad_inputs_name_the_fix():
    with pytest.raises(ValueError, match=r"unknown is empty; open-set metrics need"):
        auroc([0.5], [])
    with pytest.raises(ValueError, match=r"known holds NaN or infinite scores"):
        auroc([np.nan], [0.5])
    with pytest.raises(ValueError, match=r"correct has 1 entries but known has 2 scores"):
        aurc([0.1, 0.2], [True])
