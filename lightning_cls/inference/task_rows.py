"""A task's prediction rows, handed out as ``task.rows()``: ``predict_files``'s row per image
(its labels and probabilities, with the rejection rule's answer and the prediction set), and
the predictions CSV's header, rows and failure rows in that task's columns.

``inference/file_predictions.py`` (predict) writes through this object; serve and the export
checks read ``answer``. The columns depend on the decision (a rejection rule adds ``answer``
and its score, a conformal rule ``set``), so the object is made from the task's own settings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lightning_cls.inference import trust


class TopKRows:
    """One label per image: the ``k`` most probable labels and their probabilities."""

    def __init__(self, reject: Mapping[str, Any] | None, conformal: Mapping[str, Any] | None):
        self.reject, self.conformal = reject, conformal

    def row(self, indices: list[int], values: list[float], probs: list[float], classes) -> dict:
        """One row of ``predict_files``: ``labels`` and ``probs``, most probable first."""
        return {"labels": [classes[i] for i in indices], "probs": values}

    def judged(
        self, row: dict, verdict: tuple[bool, float] | None, members: list[str] | None = None
    ) -> dict:
        """``row`` with the rejection rule's answer: ``unknown`` (True when the confidence is
        below the threshold) and ``score``; with a prediction set, ``set`` (its labels);
        unchanged without either."""
        if verdict is not None:
            row = {**row, "unknown": verdict[0], "score": verdict[1]}
        return row if members is None else {**row, "set": list(members)}

    def answer(self, row: Mapping[str, Any]) -> str:
        """What the model answers for a judged row: ``unknown``, or its label."""
        return trust.UNKNOWN if row.get("unknown") else ";".join(row["labels"][:1])

    def _judged_header(self) -> list[str]:
        rule = [] if self.reject is None else ["answer", f"{self.reject['score']}_score"]
        return rule + ([] if self.conformal is None else ["set"])

    def _judged_cells(self, row: Mapping[str, Any]) -> list[str]:
        rule = [] if self.reject is None else [self.answer(row), f"{row['score']:.6f}"]
        return rule + ([] if self.conformal is None else [";".join(row["set"])])

    def csv_header(self, classes: Sequence[str], top_k: int) -> list[str]:
        """The predictions CSV's columns: file, label_1..k, prob_1..k, error; with a rejection
        rule, answer (the label or ``unknown``) and the confidence score after file; with a
        prediction set, ``set`` (its labels joined by ``;``) after them."""
        labels = [f"label_{i + 1}" for i in range(top_k)]
        probs = [f"prob_{i + 1}" for i in range(top_k)]
        return ["file", *self._judged_header(), *labels, *probs, "error"]

    def csv_row(self, row: Mapping[str, Any], top_k: int) -> list[str]:
        labels = row["labels"] + [""] * (top_k - len(row["labels"]))
        probs = [f"{p:.6f}" for p in row["probs"]] + [""] * (top_k - len(row["probs"]))
        return [row["file"], *self._judged_cells(row), *labels, *probs, ""]

    def csv_failure(self, path: str, reason: str, classes: Sequence[str], top_k: int) -> list:
        return [path, *[""] * (len(self._judged_header()) + 2 * top_k), reason]


class MultiLabelRows(TopKRows):
    """Any number of labels per image: every predicted label, and one probability per class."""

    def row(self, indices: list[int], values: list[float], probs: list[float], classes) -> dict:
        return {**super().row(indices, values, probs, classes), "all_probs": probs}

    def answer(self, row: Mapping[str, Any]) -> str:
        return trust.UNKNOWN if row.get("unknown") else ";".join(row["labels"])

    def csv_header(self, classes: Sequence[str], top_k: int) -> list[str]:
        """file, labels (joined by ``;``: the format a multi-label index reads), one
        ``prob_<class>`` column per class, error (with a rejection rule, answer and the score
        after file)."""
        probs = [f"prob_{name}" for name in classes]
        return ["file", *self._judged_header(), "labels", *probs, "error"]

    def csv_row(self, row: Mapping[str, Any], top_k: int) -> list[str]:
        probs = [f"{p:.6f}" for p in row["all_probs"]]
        return [row["file"], *self._judged_cells(row), ";".join(row["labels"]), *probs, ""]

    def csv_failure(self, path: str, reason: str, classes: Sequence[str], top_k: int) -> list:
        return [path, *[""] * len(self._judged_header()), "", *[""] * len(classes), reason]
