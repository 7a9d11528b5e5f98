"""The decision task decides; its other concerns are objects it hands out (issue 52): the
calibration maths (``task.calibration``), what a label is (``task.labels``) and predict's rows
and CSV columns (``task.rows()``). Code outside the task classes asks those objects and never
reads how a task stores its labels (``multi_hot``)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import torch

from lightning_cls.inference import tasks
from lightning_cls.inference.tasks import MultiClass, MultiLabel, Task, create_task

PACKAGE = Path(tasks.__file__).resolve().parents[1]
# The task classes and the objects they hand out may read ``multi_hot``.
TASK_FILES = {
    "inference/tasks.py",
    "inference/task_calibration.py",
    "inference/task_labels.py",
    "inference/task_rows.py",
}


def _methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items() if inspect.isfunction(value)} | {
        name for name, value in vars(cls).items() if isinstance(value, property)
    }


def test_the_decision_task_has_at_most_15_methods():
    names = set().union(*(_methods(c) for c in (Task, MultiClass, MultiLabel)))
    assert len(names) <= 15, sorted(names)
    assert not names & {"nll", "csv_row", "encode", "errors_panel", "check_labels"}


def test_multiclass_is_a_task_of_its_own_not_the_base():
    assert MultiClass is not Task and Task.__bases__ == (object,)
    assert {"probabilities", "decide", "predicted", "score"} <= _methods(MultiClass)
    with pytest.raises(NotImplementedError, match="must define probabilities"):
        Task.probabilities(create_task(), torch.zeros(1, 2))  # the base decides nothing


def test_multi_hot_is_read_only_inside_the_task_classes():
    readers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in TASK_FILES or rel.startswith("training/tasks/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "multi_hot":
                readers.append(f"{rel}:{node.lineno}")
    assert readers == [], "ask the task (task.labels, task.calibration) instead"


def test_predictor_has_no_flag_taking_probabilities():
    from lightning_cls.inference import predictor

    assert not hasattr(predictor, "probabilities")


def test_the_calibration_object_is_the_tasks():
    one, many = create_task("multiclass").calibration, create_task("multilabel").calibration
    assert (one.temperatures(4), many.temperatures(4)) == (1, 4)
    assert many.check_temperature([1.0, 2.0], 2) == (1.0, 2.0)
    with pytest.raises(ValueError, match="a single-label model takes one number"):
        one.check_temperature([1.0, 2.0], 2)
    one.refuse_sets()
    with pytest.raises(ValueError, match="this model is multi-label"):
        many.refuse_sets()
    probs, labels = torch.tensor([[0.2, 0.8], [0.9, 0.1]]), torch.tensor([1, 1])
    confidence, correct = one.reliability(probs, labels)
    assert confidence.tolist() == pytest.approx([0.8, 0.9]) and correct.tolist() == [1.0, 0.0]
    assert one.choose_threshold(probs, labels) is None


def test_the_labels_object_encodes_counts_and_checks():
    classes = ["cat", "dog", "fox"]
    one, many = create_task("multiclass").labels, create_task("multilabel").labels
    assert one.encode(["dog", "cat"], classes).item() == 1
    assert many.encode(["dog", "fox"], classes).tolist() == [False, True, True]
    assert one.of_folder("fox", classes).item() == 2 and one.of_folder("x", classes) is None
    assert many.of_folder("fox", classes) is None
    assert one.counts(torch.tensor([0, 2, 2]), 3) == [1, 0, 2]
    assert many.counts(torch.tensor([[1, 0, 1], [1, 1, 0]]), 3) == [2, 1, 1]
    assert one.exclusive and not many.exclusive
    with pytest.raises(ValueError, match=r"multilabel model but the labels have shape \(3,\)"):
        many.check(torch.tensor([0, 1, 2]), "model.onnx")
    values, support, names, heading, lines = one.errors(
        torch.tensor([0, 0, 1]), torch.tensor([0, 1, 1]), classes
    )
    assert values == [0.5, 1.0, 0.0] and support.tolist() == [2, 1, 0]
    assert lines == ["cat → dog: 1"] and names[1] == "accuracy"


def test_the_rows_object_follows_the_decisions_rule():
    rule = {"score": "msp", "threshold": 0.5, "keep": 0.95}
    plain, judged = create_task("multiclass").rows(), create_task(reject=rule).rows()
    assert plain.csv_header(["a", "b"], 2) == ["file", "label_1", "label_2", "prob_1", "prob_2",
                                               "error"]  # fmt: skip
    assert judged.csv_header(["a", "b"], 1)[:3] == ["file", "answer", "msp_score"]
    row = judged.judged({"file": "x.png", "labels": ["b"], "probs": [0.4]}, (True, 0.4))
    assert judged.answer(row) == "unknown" and judged.csv_row(row, 1)[1:3] == ["unknown",
                                                                             "0.400000"]  # fmt: skip
    many = create_task("multilabel").rows()
    assert many.csv_failure("y.png", "broken", ["a", "b"], 5) == ["y.png", "", "", "", "broken"]
