"""The label check's self-test gate and the number flagged (lightning_cls/doctor/selftest.py,
labels.py): planted flips found on separable data and trusted at any noise rate, a probe that
knows nothing not trusted, and as many flagged as there are wrong labels."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_cls.data import SyntheticDataModule
from lightning_cls.doctor import DoctorOptions, diagnose
from lightning_cls.doctor.labels import estimated_errors, label_issues, plant_label_noise
from lightning_cls.doctor.selftest import self_test, trusted

K, N = 4, 800


def _probe(true: np.ndarray, strength: float, seed: int) -> np.ndarray:
    """(N, K) probabilities of a probe that knows the true class by ``strength`` (0: nothing)."""
    logits = np.random.default_rng(seed).normal(0, 1, (len(true), K))
    logits[np.arange(len(true)), true] += strength
    probs = np.exp(logits)
    return probs / probs.sum(1, keepdims=True)


def _dirty(noise: float, strength: float = 4.0, seed: int = 0):
    true = np.repeat(np.arange(K), N // K)
    given, moved = plant_label_noise(true, noise, K, seed)
    return given, moved, _probe(true, strength, seed)


@pytest.mark.parametrize("noise", [0.0, 0.08, 0.3])
def test_a_good_probe_passes_its_self_test_at_any_noise_rate(noise):
    given, _, probs = _dirty(noise)
    test = self_test(given, probs, K, seed=0)
    assert test["planted"] == 20 * 10 and test["repeats"] == 20  # 1% of 800 is 8: at least 10
    assert test["recall"] >= 0.7 and test["precision"] >= 0.8, test
    assert trusted(test, 0.5)
    # The old gate: accuracy against the given labels, capped at 1 - noise (0.7 at 30%).
    accuracy = (probs.argmax(1) == given).mean()
    assert accuracy < 0.8 if noise == 0.3 else accuracy > 0.8


def test_a_probe_that_knows_nothing_fails_its_self_test():
    given, _, probs = _dirty(0.08, strength=0.0)
    test = self_test(given, probs, K, seed=0)
    assert not trusted(test, 0.5), test
    # It estimates most rows wrong, so its flags catch planted rows by chance alone.
    assert test["chance"] > 0.4 and test["recall"] < 2 * test["chance"]


def test_the_gate_reads_the_self_tests_recall_and_chance():
    test = {"recall": 0.6, "chance": 0.1}
    assert trusted(test, 0.5) and not trusted(test, 0.7)
    assert not trusted({"recall": 0.6, "chance": 0.35}, 0.5)  # not twice chance


def test_the_number_flagged_follows_the_noise():
    counts = []
    for noise in (0.02, 0.08, 0.2, 0.35):
        given, moved, probs = _dirty(noise, strength=2.5)
        issues = label_issues(given, probs)
        assert len(issues) == estimated_errors(given, probs)
        assert abs(len(issues) - len(moved)) <= 0.3 * len(moved) + 8, (noise, len(issues))
        found = len({i["row"] for i in issues} & set(moved.tolist()))
        assert found / len(issues) >= 0.6, (noise, found, len(issues))  # chance: the noise
        counts.append(len(issues))
    assert counts == sorted(counts) and counts[-1] > 5 * counts[0]


def test_findings_rank_the_given_labels_not_the_self_tests(tmp_path):
    """Separable generated images with 10% moved labels: the self-test passes (reported in
    report.md), and every finding's given class is the row's label as the check received it."""
    data = SyntheticDataModule(num_classes=4, image_size=8, train_size=300, test_size=60,
                               val_size=40, noise=0.3, seed=0)  # fmt: skip
    options = DoctorOptions(duplicates=False, probe="pixels", folds=3, plant_noise=0.1)
    result = diagnose(data, tmp_path, options)
    probe, planted = result["label_probe"], result["planted"]
    assert probe["reliable"] and probe["self_test"]["recall"] >= 0.8, probe
    assert planted["recall"] >= 0.8 and planted["precision"] >= 0.8, planted
    data.setup("fit")
    given = {(r["split"], r["row"]): r["planted"] for r in planted["rows"]}
    for issue in result["label_issues"]:
        split, row = issue["split"], issue["row"]
        label = given.get((split, row), int(data.splits[split].labels[row]))
        assert issue["given"] == label, issue  # never a self-test flip
    report = (tmp_path / "report.md").read_text()
    test = probe["self_test"]
    assert f"self-test flagged {test['found']} of {test['planted']} label flips" in report


def test_random_pictures_fail_the_self_test_without_an_accuracy_floor(folder, tmp_path):
    from lightning_cls.data.imagefolder import ImageFolderDataModule

    data = ImageFolderDataModule(str(folder), image_size=32, cache=False)
    result = diagnose(data, tmp_path, DoctorOptions(duplicates=False, folds=3, probe="pixels"))
    probe = result["label_probe"]
    assert probe["min_probe_accuracy"] is None and not probe["reliable"], probe
    banner = (tmp_path / "report.md").read_text().splitlines()[4]
    assert banner.startswith("> **Label findings not trusted**: the pixels probe's self-test")


# A learnable generated task (class prototypes plus noise): 4 classes, 16x16 pictures.
TASK = dict(num_classes=4, num_channels=3, image_size=16, train_size=320, test_size=48,
            val_size=32, batch_size=32, noise=0.8, seed=0)  # fmt: skip


@pytest.mark.parametrize("probe", ["patches", "knn"])
def test_a_cheap_probe_beats_chance_and_finds_planted_errors(probe, tmp_path):
    options = DoctorOptions(duplicates=False, probe=probe, folds=3, plant_noise=0.1)
    result = diagnose(SyntheticDataModule(**TASK), tmp_path, options)
    label_probe, planted = result["label_probe"], result["planted"]
    assert label_probe["probe"] == probe and "k-means patch features" in label_probe["features"]
    assert label_probe["out_of_fold_accuracy"] >= 0.6, label_probe  # chance: 0.25
    assert planted["recall"] >= 0.5 and planted["precision"] >= 0.5, planted  # chance: 0.1


@pytest.mark.parametrize("blind", ["knn", "patches"])
def test_auto_keeps_the_probe_whose_self_test_finds_more(blind, tmp_path, monkeypatch):
    """A probe made blind (random probabilities) loses doctor.probe=auto's self-test."""
    from lightning_cls.doctor import probes

    cls = {"knn": probes.KnnProbe, "patches": probes.PatchProbe}[blind]
    rng = np.random.default_rng(0)
    monkeypatch.setattr(cls, "probabilities", lambda self, images, labels, k, folds, seed: (
        rng.dirichlet(np.ones(k), len(labels))))  # fmt: skip
    options = DoctorOptions(duplicates=False, probe="auto", folds=3)
    result = diagnose(SyntheticDataModule(**TASK), tmp_path, options)
    probe = result["label_probe"]
    other = "patches" if blind == "knn" else "knn"
    assert probe["probe"] == other and set(probe["chosen_from"]) == {"patches", "knn"}
    assert probe["chosen_from"][other] > probe["chosen_from"][blind] + 0.2, probe
    report = (tmp_path / "report.md").read_text()
    assert f"doctor.probe=auto chose {other} by self-test recall" in report


def test_a_mean_of_probes_is_the_mean_of_their_probabilities(tmp_path, monkeypatch):
    """``doctor.probe=patches+knn``: one probe whose out-of-fold probabilities are the mean of
    the parts' (each part computed once, the patch features shared), reported under its name."""
    from lightning_cls.doctor import probes

    seen = {}
    for cls in (probes.PatchProbe, probes.KnnProbe):
        original = cls.probabilities

        def spy(self, images, labels, k, folds, seed, original=original):
            seen[self.name] = original(self, images, labels, k, folds, seed)
            return seen[self.name]

        monkeypatch.setattr(cls, "probabilities", spy)
    mean = {}
    spy_mean = probes.MeanProbe.probabilities
    monkeypatch.setattr(probes.MeanProbe, "probabilities", lambda self, *a: (
        mean.setdefault("probs", spy_mean(self, *a))))  # fmt: skip
    options = DoctorOptions(duplicates=False, probe="patches+knn", folds=3, plant_noise=0.1)
    result = diagnose(SyntheticDataModule(**TASK), tmp_path, options)
    label_probe, planted = result["label_probe"], result["planted"]
    assert label_probe["probe"] == "patches+knn" and label_probe["features"].startswith("mean of")
    np.testing.assert_allclose(mean["probs"], (seen["patches"] + seen["knn"]) / 2)
    assert not np.allclose(seen["patches"], seen["knn"])  # two views, or the test says nothing
    assert planted["recall"] >= 0.5 and planted["precision"] >= 0.5, planted  # chance: 0.1


def test_a_mean_keeps_finding_errors_when_one_part_is_blind(tmp_path, monkeypatch):
    """A part that knows nothing (random probabilities) dilutes the mean but does not hide what
    the other part finds; a broken mean (e.g. the blind part alone) fails the bar."""
    from lightning_cls.doctor import probes

    rng = np.random.default_rng(0)
    monkeypatch.setattr(probes.KnnProbe, "probabilities", lambda self, images, labels, k, folds, seed: (
        rng.dirichlet(np.ones(k) * 20, len(labels))))  # fmt: skip
    options = DoctorOptions(duplicates=False, probe="patches+knn", folds=3, plant_noise=0.1)
    planted = diagnose(SyntheticDataModule(**TASK), tmp_path, options)["planted"]
    assert planted["recall"] >= 0.5 and planted["precision"] >= 0.4, planted  # chance: 0.1
