"""benchmarks/ood.py and benchmarks/reject_cost.py --quick: the unknowns benchmark scores every
rule on every set, and the kNN rule's predict cost is measured against the plain file."""

from __future__ import annotations

import json

import numpy as np
import pytest


def ood_combined() -> list[str]:
    """benchmarks/ood.py's twelve candidates for reject=auto's defaults, by name."""
    return [f"combined_{join}_{logit}_{keep}" for join in ("gate", "min")
            for logit in ("maxlogit", "energy") for keep in (95, 98, 99)]  # fmt: skip


def test_ood_quick_mode_scores_every_rule_on_every_set(run_quick, tmp_path):
    report = run_quick("ood.py", "--work", str(tmp_path))
    (run,) = report["runs"]
    assert run["rule"] == "knn" and 0.8 <= run["test_kept_at_rule"] <= 1
    for name in ("near", "near_val", "noise", "digits", "shapes"):
        for score in ("msp", "energy", "pnorm", "knn", "mahalanobis", "maxlogit", "gen", "react",
                      "vim", "rmds", "knn_penultimate", "combined", *ood_combined()):  # fmt: skip
            assert 0 <= run[f"{name}_auroc_{score}"] <= 1
            assert 0 <= run[f"{name}_fpr95_{score}"] <= 1
    # Colour blobs against grey digits and uniform noise: far from anything trained on.
    assert run["noise_auroc_knn"] > 0.9 and run["digits_auroc_knn"] > 0.9


def test_literature_scores_rank_training_like_features_above_strangers(benchmark_module):
    """benchmarks/ood.py's scores, each its registered rule's, on 3 Gaussian classes in 16-d
    whose signal lives in 4 dimensions: held-out draws of the classes score above points off
    the classes' subspace (ViM's residual, the Mahalanobis distances, kNN) or between classes
    with small logits (max logit, GEN); ReAct's formula is pinned."""
    import torch

    from lightning_cls.inference.tasks import create_task

    ood = benchmark_module("ood")
    rng = np.random.default_rng(0)
    centres = np.zeros((3, 16))
    centres[:, :3] = 6 * np.eye(3)

    def draw(n):
        labels = rng.integers(0, 3, n)
        h = centres[labels] + rng.normal(0, 0.5, (n, 16)) * np.r_[np.ones(4), 0.05 * np.ones(12)]
        return np.abs(h).astype(np.float32), labels  # ReLU features

    train, labels = draw(600)
    head = torch.nn.Linear(16, 3)
    with torch.no_grad():
        head.weight.copy_(torch.as_tensor(centres, dtype=torch.float32))
        head.bias.fill_(-18.0)

    def logits(h):
        return (h @ centres.T - 18.0).astype(np.float32)

    # the features of a network without a stem: h itself (the rules normalise it)
    scores = ood.Scores(create_task("multiclass"), head, logits(train), train, labels, {"k": 10})
    assert set(scores.fitted) == {*ood.SCORES, *ood.COMBINED, *ood.LITERATURE}
    assert len(ood.COMBINED) == 12 and "combined" in ood.SCORES  # reject=auto and its candidates
    known, _ = draw(200)
    # class-like logits, but activity in the 12 quiet dimensions
    off_subspace = draw(200)[0] + np.r_[np.zeros(4), np.ones(12)] * np.abs(
        rng.normal(0, 1, (200, 16))
    ).astype(np.float32)
    between = np.abs(rng.normal(0, 0.5, (200, 16))) + 2.0 * np.r_[np.ones(3), np.zeros(13)]
    between = between.astype(np.float32)

    np.testing.assert_allclose(scores(logits(known), known)["maxlogit"], logits(known).max(1))
    inside = scores(logits(known), known)
    for name, strangers in (("vim", off_subspace), ("rmds", off_subspace),
                            ("knn_penultimate", off_subspace), ("maxlogit", between),
                            ("gen", between), ("combined", off_subspace),
                            ("combined", between)):  # fmt: skip
        auroc, _ = ood.auroc_fpr95(inside[name], scores(logits(strangers), strangers)[name])
        assert auroc > 0.95, (name, auroc)
    # ReAct truncates large activations, so on these sparse features it ranks nothing well:
    # pin its formula, the energy of the clipped features' logits
    clip = scores.fitted["react"][2]["clip"]
    assert clip == pytest.approx(np.quantile(train, 0.9), rel=1e-4)
    clipped = np.minimum(known, clip) @ centres.T - 18.0
    expected = np.log(np.exp(clipped).sum(1))
    np.testing.assert_allclose(inside["react"], expected, rtol=1e-4)


def test_reject_cost_quick_mode_times_both_files(run_quick, tmp_path):
    report = run_quick("reject_cost.py", "--work", str(tmp_path))
    assert report["images"] == 64 and report["k"] == 50
    assert report["plain_ms"] > 0 and report["knn_ms"] > 0
    assert report["added"]["min"] <= report["added"]["median"] <= report["added"]["max"]


def test_int8_ece_quick_mode_compares_both_files_on_the_test_split(run_quick, tmp_path):
    report = run_quick("int8_ece.py", "--work", str(tmp_path))
    (run,) = report["runs"]
    assert run["images"] == 18 and run["temperature_fit"] == "auto"
    # auto is nll for this model (no label smoothing): the same fit, on the same validation
    # images, as training's calibrate=true
    trained = json.loads((tmp_path / "train_seed0" / "results.json").read_text())
    assert run["temperature"] == pytest.approx(trained["calibration"]["temperature"], rel=1e-3)
    for key in ("ece_fp32", "ece_int8", "acc_fp32", "acc_int8"):
        assert 0 <= run[key] <= 1
    assert run["acc_fp32"] > 0.6  # 3 colours: learned
