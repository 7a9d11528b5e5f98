"""Multi-label scores (inference/scores.py): mAP, F1 and the threshold chosen for it."""

from __future__ import annotations

import pytest
import torch

from lightning_cls.inference.scores import (
    average_precision_per_label,
    best_threshold,
    f1_at,
    mean_average_precision,
)


def test_map_leaves_out_a_label_without_positives_instead_of_scoring_it_zero():
    probs = torch.tensor([[0.9, 0.2, 0.1], [0.8, 0.7, 0.3], [0.1, 0.6, 0.2], [0.2, 0.1, 0.4]])
    targets = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 0]])
    ap = average_precision_per_label(probs, targets)
    assert ap[:2].tolist() == [1.0, 1.0] and ap[2].isnan()
    assert mean_average_precision(probs, targets) == 1.0  # torchmetrics' macro mean: 0.667
    targets[2, 0] = 1  # a positive ranked last of four: AP = (1 + 1 + 3/4) / 3
    assert average_precision_per_label(probs, targets)[0] == pytest.approx(11 / 12)


def test_f1_and_the_threshold_chosen_for_it():
    probs = torch.tensor([[0.9, 0.35], [0.3, 0.8], [0.32, 0.2], [0.7, 0.31]])
    targets = torch.tensor([[1, 1], [0, 1], [0, 0], [1, 0]])
    micro, macro, per_label = f1_at(probs, targets, 0.5)
    # label 0: tp 2; label 1: tp 1, fn 1 -> micro 2*3 / (2*3 + 0 + 1), label-1 F1 2/3
    assert micro == pytest.approx(6 / 7) and per_label.tolist() == pytest.approx([1.0, 2 / 3])
    assert macro == pytest.approx((1 + 2 / 3) / 2)
    # 0.35 catches label 1's positive at 0.35 and none of the negatives below it
    assert best_threshold(probs, targets) == 0.35
    assert f1_at(probs, targets, 0.35)[0] == 1.0


def test_macro_f1_leaves_out_a_label_neither_true_nor_predicted():
    probs = torch.tensor([[0.9, 0.1], [0.2, 0.1]])
    targets = torch.tensor([[1, 0], [0, 0]])
    micro, macro, per_label = f1_at(probs, targets, 0.5)
    assert per_label[1].isnan() and macro == micro == 1.0
