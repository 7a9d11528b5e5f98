"""A multi-label artifact behind Predictor: every label above the threshold, its CSV, its score."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from lightning_cls.data.multilabel import read_index
from lightning_cls.inference import load_artifact, predict_files, write_predictions_csv


def test_predict_lists_every_label_above_the_threshold(
    multilabel_run, multilabel_squares, tmp_path
):
    predictor = load_artifact(Path(multilabel_run["run_dir"]) / "export" / "model.onnx")
    files = sorted((multilabel_squares / "images").glob("test_*.png"))[:12]
    rows, failures = predict_files(predictor, files, batch_size=5)
    assert not failures and len(rows) == 12
    t = predictor.spec.decision.threshold
    for row in rows:
        probs = dict(zip(predictor.spec.classes, row["all_probs"]))
        assert set(row["labels"]) == {c for c, p in probs.items() if p >= t}
        assert row["probs"] == sorted(row["probs"], reverse=True)
    out = tmp_path / "predictions.csv"
    write_predictions_csv(out, rows, [(tmp_path / "bad.png", "not an image")], 5, predictor.spec)
    table = list(csv.DictReader(out.open()))
    assert list(table[0]) == [
        "file",
        "labels",
        *(f"prob_{c}" for c in predictor.spec.classes),
        "error",
    ]
    assert table[0]["labels"] == ";".join(rows[0]["labels"])
    assert table[-1]["error"] == "not an image"
    # the CSV is itself a multi-label index: what predict wrote, the DataModule reads
    index = read_index(out)  # the unreadable file's row is skipped
    assert [labels for _, labels, _ in index] == [r["labels"] for r in rows]
    # and half or more are exactly the true label sets (chance: ~1 in 16 per image)
    truth = {f: labels for f, labels, _ in read_index(multilabel_squares / "test.csv")}
    right = sum(set(r["labels"]) == set(truth[f"images/{Path(r['file']).name}"]) for r in rows)
    assert right >= 6, right


def test_scoring_a_multilabel_model_on_single_label_data_says_so(multilabel_run):
    predictor = load_artifact(multilabel_run["best_ckpt"])
    images = torch.zeros(4, 3, 32, 32, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"is a multilabel model but the labels have shape \(4,\)"):
        predictor.accuracy(images, torch.zeros(4, dtype=torch.int64))
