"""Prediction CSVs are replaced whole: a failed write never leaves a half-written file."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from lightning_cls.inference import write_predictions_csv


def test_predictions_csv_is_written_whole_or_not_at_all(tmp_path):
    out = tmp_path / "preds.csv"
    rows = [{"file": "a.png", "labels": ["cat", "dog"], "probs": [0.9, 0.1]}]
    write_predictions_csv(out, rows, [(Path("b.png"), "not a readable image")], top_k=2)
    with out.open(newline="") as fh:
        table = list(csv.reader(fh))
    assert table[0] == ["file", "label_1", "label_2", "prob_1", "prob_2", "error"]
    assert table[1] == ["a.png", "cat", "dog", "0.900000", "0.100000", ""]
    assert table[2] == ["b.png", "", "", "", "", "not a readable image"]
    before = out.read_bytes()
    with pytest.raises(KeyError):  # fails after the header and the first row were written
        write_predictions_csv(out, rows + [{"file": "c.png"}], [], top_k=2)
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["preds.csv"]  # no temp file left behind
