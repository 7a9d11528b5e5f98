"""The spec's layout: one ``task`` entry holds how the outputs are decided (issue 52 item 3),
and every older artifact's flat layout (``task`` a name, ``threshold``, ``temperature``,
``reject``, ``label_smoothing``, ``conformal`` beside it) still loads to the same decision."""

import dataclasses
import json

import numpy as np
import pytest

from lightning_cls.inference.spec import InputSpec, SpecError, merge_spec

INPUT = {"classes": ["a", "b", "c"], "mean": [0.5], "std": [0.25], "image_size": 8}
INPUT = {**INPUT, "num_channels": 1}
REJECT = {"score": "msp", "threshold": 0.55, "keep": 0.9}
CONFORMAL = {"method": "aps", "alpha": 0.1, "qhat": 0.7, "lam": 0.0, "k_reg": 0, "images": 40}
LOGITS = np.array([[2.0, 0.5, -1.0], [0.1, 0.0, 0.05], [-3.0, 4.0, 1.0]], np.float32)


def test_the_spec_has_at_most_13_fields():
    fields = [f.name for f in dataclasses.fields(InputSpec)]
    assert len(fields) <= 13, fields
    assert "task" in fields and not {"threshold", "temperature", "channel_order"} & set(fields)


def test_an_old_flat_layout_loads_to_the_same_decision_as_the_task_entry():
    flat = {**INPUT, "task": "multiclass", "temperature": 2.0, "reject": REJECT}
    flat |= {"label_smoothing": 0.1, "conformal": CONFORMAL, "channel_order": "L"}
    old = InputSpec.from_json(json.dumps(flat))  # an older artifact's meta.json
    entry = {"name": "multiclass", "temperature": 2.0, "reject": REJECT}
    new = InputSpec(**INPUT, task={**entry, "label_smoothing": 0.1, "conformal": CONFORMAL})
    assert old == new and old.task["label_smoothing"] == 0.1
    probs = old.decision.probabilities(LOGITS)
    np.testing.assert_allclose(probs, new.decision.probabilities(LOGITS))
    np.testing.assert_allclose(probs[0], np.exp(LOGITS[0] / 2) / np.exp(LOGITS[0] / 2).sum())
    verdicts = old.decision.verdicts(LOGITS)
    assert [unknown for unknown, _ in verdicts] == [False, True, False]
    assert verdicts == new.decision.verdicts(LOGITS)
    assert old.decision.sets(probs) == new.decision.sets(probs)
    # the new layout is what is written; it reads back to the same spec
    written = old.to_dict()
    assert not {"threshold", "temperature", "reject", "conformal"} & set(written)
    assert written["task"]["reject"] == REJECT and written["channel_order"] == "L"
    assert InputSpec.from_props(old.to_props()) == old


def test_an_old_multilabel_layout_keeps_its_threshold_and_temperatures():
    flat = {**INPUT, "task": "multilabel", "threshold": 0.3, "temperature": [1.0, 2.0, 4.0]}
    props = {key: json.dumps(value) for key, value in flat.items()}  # older ONNX metadata
    spec = InputSpec.from_props(props)
    assert spec.task["name"] == "multilabel" and spec.decision.threshold == 0.3
    assert spec.decision.temperature == (1.0, 2.0, 4.0)
    probs = spec.decision.probabilities(LOGITS)
    indices, _ = spec.decision.decide(probs, 3)
    assert indices[2] == [1, 2]  # sigmoid(4 / 2), sigmoid(1 / 4) reach 0.3; sigmoid(-3) not


def test_flat_overrides_change_one_setting_of_the_stored_entry():
    stored = InputSpec(**INPUT, task={"temperature": 2.0, "reject": REJECT}).to_dict()
    hotter = merge_spec(stored, {"temperature": 3.0}, "model.onnx")
    assert hotter.decision.temperature == 3.0 and hotter.decision.reject == REJECT
    named = merge_spec(stored, {"task": "multilabel", "threshold": 0.4}, "model.onnx")
    assert named.task["name"] == "multilabel" and named.decision.threshold == 0.4
    assert named.decision.temperature == 2.0  # the entry's other settings stay
    with pytest.raises(SpecError, match=r"temperature=0 holds a value that is not a number > 0"):
        merge_spec(stored, {"temperature": 0}, "model.onnx")
    with pytest.raises(ValueError, match=r"Unknown spec key\(s\) \['temprature'\]"):
        merge_spec(stored, {"temprature": 3.0}, "model.onnx")


def test_a_checkpoints_task_options_are_not_part_of_the_spec():
    hparams = {**INPUT, "task": {"name": "multilabel", "pos_weight": [2.0] * 3, "threshold": 0.35}}
    spec = InputSpec.from_hparams(hparams)
    assert spec.task == {
        "name": "multilabel",
        "threshold": 0.35,
        "temperature": 1.0,
        "reject": None,
        "label_smoothing": 0.0,
        "conformal": None,
    }


def test_bad_task_entries_name_the_setting():
    with pytest.raises(SpecError, match=r"threshold='high' is not a probability"):
        InputSpec(**INPUT, task={"name": "multilabel", "threshold": "high"})
    with pytest.raises(SpecError, match=r"task='multi' is not known; use one of .*multiclass"):
        InputSpec(**INPUT, task="multi")
    with pytest.raises(SpecError, match=r"task=3 is not a task name or its entry"):
        InputSpec(**INPUT, task=3)
    with pytest.raises(TypeError, match=r"with_decision got \['temprature'\]"):
        InputSpec(**INPUT).with_decision(temprature=2.0)
    assert InputSpec(**INPUT).with_decision(temperature=2.0).decision.temperature == 2.0
