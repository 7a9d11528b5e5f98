"""Issue 51's mutation pass over inference/trust.py and the task's verdicts: the numpy scores
that ONNX/OpenVINO predict and serve compute (multi-label JointEnergy's softplus, the energy's
logsumexp) equal torch's, the threshold keeps the share asked, and a score equal to the
threshold is kept (msp saturates: a threshold of exactly 1.0 would otherwise reject all)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lightning_cls.inference import InputSpec, trust

X = np.array(
    [[-60.0, -3.0, -0.5, 0.0, 0.5, 3.0, 60.0], [1e-3, -1e-3, 20.0, -20.0, 7.0, 1.0, -1.0]],
    np.float32,
)


def test_numpy_softplus_sum_and_logsumexp_equal_torchs():
    t = torch.from_numpy(X)
    np.testing.assert_allclose(trust.softplus_sum(X), F.softplus(t).sum(1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(trust.logsumexp(X), t.logsumexp(1).numpy(), rtol=1e-6)
    assert np.isfinite(trust.softplus_sum(X * 100)).all()  # stable far from 0


def test_the_threshold_keeps_the_share_asked():
    scores = np.random.default_rng(0).normal(size=2000)
    for keep in (0.5, 0.9, 0.95):
        threshold = trust.quantile_threshold(scores, keep)
        assert (scores >= threshold).mean() == pytest.approx(keep, abs=1e-3)


def test_a_score_equal_to_the_threshold_is_kept():
    base = dict(classes=("a", "b"), mean=(0.5,), std=(0.25,), image_size=4, num_channels=1)
    logits = np.array([[0.0, 0.0], [200.0, 0.0], [0.0, 0.1]], np.float32)  # msp 0.5, 1.0, <0.53
    half = InputSpec(**base, task={"reject": {"score": "msp", "threshold": 0.5, "keep": 0.95}})
    assert [unknown for unknown, _ in half.decision.verdicts(logits)] == [False, False, False]
    sure = InputSpec(**base, task={"reject": {"score": "msp", "threshold": 1.0, "keep": 0.95}})
    assert [unknown for unknown, _ in sure.decision.verdicts(logits)] == [True, False, True]
