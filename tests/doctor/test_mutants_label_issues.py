"""Issue 51's mutation pass over the doctor's label findings: each finding's given class is
the row's own label (not the probe's guess), with the probability the probe gave it, and it
names the file of that very row (test_probes.py only checks the file is one of the set's)."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_cls.doctor.labels import label_issues

pytest.importorskip("cleanlab")


def test_a_finding_gives_the_rows_label_and_suggests_the_probes_class():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(3), 30)  # (90,)
    probs = np.full((90, 3), 0.05)
    probs[np.arange(90), labels] = 0.9  # a probe that agrees with every label...
    probs[[4, 40]] = [[0.02, 0.03, 0.95], [0.9, 0.06, 0.04]]  # ... but two
    probs += rng.uniform(0, 0.01, probs.shape)
    probs /= probs.sum(1, keepdims=True)
    issues = label_issues(labels, probs)
    assert [i["row"] for i in issues] == [4, 40]  # most confident mistake first
    first, second = issues
    assert (first["given"], first["suggested"]) == (0, 2)
    assert (second["given"], second["suggested"]) == (1, 0)
    assert first["given_prob"] == pytest.approx(probs[4, 0], abs=1e-4)
    assert first["suggested_prob"] == pytest.approx(probs[4, 2], abs=1e-4)


def test_each_finding_names_the_file_of_its_own_row(folder, tmp_path):
    from lightning_cls.data.imagefolder import ImageFolderDataModule
    from lightning_cls.doctor import DoctorOptions, diagnose

    data = ImageFolderDataModule(str(folder), image_size=32, cache=False, batch_size=16)
    options = DoctorOptions(duplicates=False, folds=3, probe="pixels")
    issues = diagnose(data, tmp_path, options)["label_issues"]
    assert issues, "random pictures with two labels: some are flagged"
    files = data.split_files()
    for issue in issues:
        row_file = files[issue["split"]][issue["row"]]
        assert str(folder / issue["file"]) == row_file, issue
        assert data.classes[issue["given"]] == row_file.split("/")[-2]  # its folder's class
