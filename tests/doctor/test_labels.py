"""Likely label errors with the linear probes (pooled pixels, a checkpoint's embeddings) and
class balance; the kfold probe is tests/doctor/test_probes.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lightning_cls.data import DigitsDataModule
from lightning_cls.doctor import DoctorOptions, diagnose
from lightning_cls.doctor.labels import class_balance, precision_at_recall


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
    result = diagnose(data, out, DoctorOptions(duplicates=False, probe="pixels"))
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
    assert balance["suggest"] == ["task.class_weights=auto", "data.balanced_sampler=true"]
    weights = balance["class_weights"]  # inverse frequency, mean 1: what auto will use
    assert weights["c"] == pytest.approx(20 * weights["a"], rel=1e-3)
    assert sum(weights.values()) == pytest.approx(3.0, abs=1e-3)
    balanced = class_balance({"train": [50, 40, 60]}, ["a", "b", "c"], 3.0, "multiclass")
    assert balanced["suggest"] == [] and balanced["imbalance"] == 1.5
    multilabel = class_balance({"train": [90, 3]}, ["x", "y"], 3.0, "multilabel")
    assert multilabel["suggest"] == ["task.pos_weight=auto"]


def test_embeddings_of_a_checkpoint_find_flipped_labels(trained, tmp_path):
    """doctor.features_from: the probe on a trained network's embeddings (a SimpleCNN fit on
    the clean labels of the same generated task)."""
    from helpers.tiny import LEARNABLE, make_data

    data = make_data(LEARNABLE)
    data.setup("fit")
    labels = data.splits["train"].labels
    rng = np.random.default_rng(1)
    rows = rng.choice(len(labels), 20, replace=False)
    labels[rows] = (labels[rows] + torch.as_tensor(rng.integers(1, 4, len(rows)))) % 4
    options = DoctorOptions(duplicates=False, probe="embedding", features_from=str(trained.ckpt))
    result = diagnose(data, tmp_path, options)
    probe = result["label_probe"]
    assert probe["features"] == str(trained.ckpt) and probe["reliable"]
    found = {(i["split"], i["row"]) for i in result["label_issues"]}
    hits = len(found & {("train", int(r)) for r in rows})
    assert hits >= 16 and hits / len(found) >= 0.7, (hits, len(found))


def test_features_from_a_network_for_other_images_is_refused(trained, tmp_path):
    data = DigitsDataModule()  # 1 channel; the trained SimpleCNN takes 3
    options = DoctorOptions(duplicates=False, probe="embedding", features_from=str(trained.ckpt))
    with pytest.raises(ValueError, match=r"features_from=.* takes 3-channel images and the data"):
        diagnose(data, tmp_path, options)


def test_precision_at_recall_is_the_shortest_head_that_reaches_the_recall():
    # 4 real errors; the head holding 3 of them (recall 0.75 >= 0.7) is the first 5 findings.
    ranking = [True, True, False, False, True, False, True]
    assert precision_at_recall(ranking, relevant=4, recall=0.7) == pytest.approx(3 / 5)
    assert precision_at_recall(ranking, relevant=4, recall=0.5) == 1.0  # the first 2
    assert precision_at_recall(ranking, relevant=4, recall=1.0) == pytest.approx(4 / 7)
    # The findings hold 4 of 10 errors: a recall of 0.7 is never reached.
    assert precision_at_recall(ranking, relevant=10, recall=0.7) is None
    assert precision_at_recall([], relevant=3, recall=0.7) is None
    assert precision_at_recall([False, True], relevant=0, recall=0.7) is None
