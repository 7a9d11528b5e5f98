"""Likely label errors (out-of-fold probe + cleanlab) and class balance on digits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lightning_cls.data import DigitsDataModule
from lightning_cls.doctor import DoctorOptions, diagnose
from lightning_cls.doctor.labels import class_balance


@pytest.fixture(scope="module")
def flipped(tmp_path_factory):
    """Digits with 5% of the train labels moved to another class, and the doctor's result."""
    data = DigitsDataModule(seed=0)
    data.setup("fit")
    labels = data.splits["train"].labels  # (N,) changed in place: setup() keeps these splits
    rng = np.random.default_rng(0)
    rows = rng.choice(len(labels), int(round(0.05 * len(labels))), replace=False)
    labels[rows] = (labels[rows] + torch.as_tensor(rng.integers(1, 10, len(rows)))) % 10
    out = tmp_path_factory.mktemp("doctor")
    result = diagnose(data, out, DoctorOptions(duplicates=False))
    return {("train", int(r)) for r in rows}, result, out


def test_flipped_labels_found_with_recall_and_precision_over_70_percent(flipped):
    planted, result, _ = flipped
    found = {(i["split"], i["row"]) for i in result["label_issues"]}
    hits = len(planted & found)
    assert hits / len(planted) >= 0.7, f"recall {hits}/{len(planted)}"
    assert hits / len(found) >= 0.7, f"precision {hits}/{len(found)}"


def test_label_issues_suggest_another_class_and_are_drawn(flipped):
    planted, result, out = flipped
    issue = result["label_issues"][0]
    assert issue["given"] != issue["suggested"] and issue["suggested_prob"] > issue["given_prob"]
    report = (out / "report.md").read_text()
    assert f"## Likely label errors\n\n{len(result['label_issues'])} images" in report
    assert "![label issues](label_issues.png)" in report
    assert (out / "label_issues.png").stat().st_size > 0
    assert "unreadable, truncated and empty files" in result["skipped"]["files"]


def test_imbalance_suggests_the_existing_settings():
    counts = {"train": [400, 100, 20], "test": [10, 10, 10]}
    balance = class_balance(counts, ["a", "b", "c"], ratio=3.0, task="multiclass")
    assert balance["imbalance"] == 20.0
    assert balance["suggest"] == ["loss.class_weights=auto", "data.balanced_sampler=true"]
    weights = balance["class_weights"]  # inverse frequency, mean 1: what auto will use
    assert weights["c"] == pytest.approx(20 * weights["a"], rel=1e-3)
    assert sum(weights.values()) == pytest.approx(3.0, abs=1e-3)
    balanced = class_balance({"train": [50, 40, 60]}, ["a", "b", "c"], 3.0, "multiclass")
    assert balanced["suggest"] == [] and balanced["imbalance"] == 1.5
    multilabel = class_balance({"train": [90, 3]}, ["x", "y"], 3.0, "multilabel")
    assert multilabel["suggest"] == ["loss.pos_weight=auto"]
