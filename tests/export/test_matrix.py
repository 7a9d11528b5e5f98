"""The export matrix: every registered format x every kind of decision a model can carry.

Five models (built once per module): the tiny trained SimpleCNN ``plain``; the same network
``calibrated`` (a fitted temperature != 1), with ``reject=knn`` (feature-space unknowns), with
``conformal`` prediction sets; and the shared ``multilabel`` run with one fitted temperature per
label. Each is a checkpoint as ``python -m lightning_cls.calibrate`` writes it, exported by
``export_model`` as the command does. Every format either

- answers like the checkpoint: each written file, opened by ``load_artifact`` and run by
  ``predict_files`` (what ``predict`` does) on PNGs of held-out images, gives the checkpoint's
  labels, probabilities, ``unknown`` verdicts and prediction sets (the end-to-end ONNX file,
  which lightning_cls does not load, its probabilities and labels through ONNX Runtime; Core
  ML, which predicts on macOS only, carries the checkpoint's decision in its metadata), or
- refuses in ONE line naming the format and the reason, before anything is written.

Held-out (test) images, not the validation images calibration fitted on: a rejection threshold
and a conformal quantile sit exactly on a validation image's score, where the last float bit
decides. INT8 files answer approximately by design (their contract is the accuracy gate): they
must carry the decision and agree on most labels. The converters that take seconds per model
(INT8, ``auto``, the on-device formats) are ``slow``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import png_bytes
from lightning_cls.export.exporter import ExportConfig, export_model
from lightning_cls.export.writer import FORMATS
from lightning_cls.inference import load_artifact, predict_files
from lightning_cls.inference.spec import InputSpec

IMAGES = 12
# Converters that take seconds each (x 5 models): the slow tier.
SLOW = {
    "onnx_int8",
    "torchscript_int8_dynamic",
    "openvino_int8",
    "litert_int8",
    "auto",
    "executorch",
    "litert",
    "coreml",
}
TRITON_E2E = "triton_e2e"  # conf/export/triton_e2e.yaml: the repository around the e2e file
# format -> {model: the one-line refusal}; every other pair must answer like the checkpoint.
E2E_REFUSES = r"the end-to-end file does not carry \(it answers probabilities only.*use export=onnx"
REFUSALS = {
    "onnx_e2e": {
        "knn": rf"^export=onnx_e2e: the model is calibrated with reject=knn, which {E2E_REFUSES}",
        "conformal": rf"^export=onnx_e2e: .* with conformal=\w+, which {E2E_REFUSES}",
    },
    "coreml": {"knn": r"^export=coreml: reject=knn scores the network's features"},
}
REFUSALS[TRITON_E2E] = REFUSALS["onnx_e2e"]


@dataclass
class Model:
    ckpt: Path
    net: torch.nn.Module
    spec: InputSpec
    data: object  # the DataModule (INT8 calibrates and auto measures on it)
    files: list[Path]  # PNGs of held-out images
    rows: list[dict]  # predict_files of the checkpoint on them


def _calibrated(ckpt, data, root: Path, name: str, **options) -> Model:
    """``ckpt`` calibrated on ``data``'s validation split (``options``: ``calibrate``'s), as
    ``python -m lightning_cls.calibrate`` writes it; PNGs of test images and its answers."""
    from lightning_cls.inference import load_torch_model
    from lightning_cls.training.calibration import calibrate, update_checkpoint

    net, spec = load_torch_model(ckpt)
    data.setup("fit")  # every split
    if options:
        fitted = calibrate(net, spec, data.splits["val"], train=data.splits["train"], **options)
        ckpt = update_checkpoint(ckpt, root / f"{name}.ckpt", fitted.spec_updates)
        net, spec = load_torch_model(ckpt)
    files = []
    for i, image in enumerate(data.splits["test"].images[:IMAGES]):
        files.append(root / f"{name}_{i}.png")
        files[-1].write_bytes(png_bytes(image))
    rows, failures = predict_files(load_artifact(ckpt), files)
    assert not failures
    return Model(ckpt, net.eval(), spec, data, files, rows)


@pytest.fixture(scope="module")
def models(trained, multilabel_run, multilabel_squares, tmp_path_factory) -> dict[str, Model]:
    from lightning_cls.data.multilabel import MultiLabelDataModule

    root = tmp_path_factory.mktemp("matrix_models")
    torch.manual_seed(0)
    found = {
        "plain": _calibrated(trained.ckpt, trained.data, root, "plain"),
        "calibrated": _calibrated(trained.ckpt, trained.data, root, "calibrated", temperature=True),
        "knn": _calibrated(
            trained.ckpt, trained.data, root, "knn", reject={"name": "knn", "k": 5, "bank": 64}
        ),
        "conformal": _calibrated(trained.ckpt, trained.data, root, "conformal", conformal=0.02),
    }
    squares = MultiLabelDataModule(str(multilabel_squares))
    ml = _calibrated(multilabel_run["best_ckpt"], squares, root, "multilabel", temperature=True)
    found["multilabel"] = ml
    # What each model is meant to exercise is really there.
    assert abs(found["calibrated"].spec.decision.temperature - 1) > 0.05
    assert found["knn"].spec.decision.reject["score"] == "knn"
    assert found["knn"].spec.decision.temperature != 1  # calibrate fits T beside the rule
    assert all("unknown" in r for r in found["knn"].rows)
    assert found["conformal"].spec.decision.conformal is not None
    assert any(len(r["set"]) > 1 for r in found["conformal"].rows)
    assert ml.spec.task["name"] == "multilabel" and len(set(ml.spec.decision.temperature)) > 1
    return found


def _formats_for(name: str) -> list[str]:
    """``name`` after the formats it is made from (OpenVINO after ONNX, ...)."""
    if name == TRITON_E2E:
        return ["onnx_e2e", "triton"]
    writer = FORMATS.create(name)
    sources = [r for r in writer.requires if r in FORMATS]
    return [*(f for source in sources for f in _formats_for(source)), name]


def _config(formats: list[str], triton_source: str = "onnx") -> ExportConfig:
    """The export of ``formats`` as the command builds it; a missing extra skips, naming it."""
    try:
        return ExportConfig(
            formats=formats,
            torchscript={"modes": ["trace", "script"]},
            int8=dict(latency_runs=0, calibration_batches=2, max_acc_drop=100.0),
            auto=dict(rounds=1, window_s=0.05, batch_size=8, calibration_batches=2),
            triton={"source": triton_source},
        )
    except ValueError as err:  # this machine lacks the format's package or converter
        if "needs" in str(err) or "litert-torch" in str(err):
            pytest.skip(str(err))
        raise


def _config_of(name: str) -> ExportConfig:
    if name == TRITON_E2E:
        return _config(["onnx_e2e", "triton"], "onnx_e2e")
    return _config(_formats_for(name))


# The fast formats that every model's export accepts are written in one export per model (one
# ONNX file for ONNX, OpenVINO and Triton, as `export.formats=[...]` writes them), the
# end-to-end file in one with its Triton repository; the others each in an export of their own.
SHARED = ["onnx", "torchscript", "pt2", "openvino", "triton"]


@pytest.fixture(scope="module")
def exported(models, tmp_path_factory):
    """``exported(variant, name)``: the ``ExportResult`` of an export that wrote ``name``."""
    cache = {}

    def export(variant: str, name: str):
        if name in ("onnx_e2e", TRITON_E2E):
            name = TRITON_E2E  # the end-to-end file and the repository around it
        formats = SHARED if name in SHARED else [name]
        key = (variant, tuple(formats))
        if key not in cache:
            model = models[variant]
            config = _config(formats) if name in SHARED else _config_of(name)
            out = tmp_path_factory.mktemp(f"{variant}_{name}")
            cache[key] = export_model(model.net, model.spec, out, config, model.data)
        return cache[key]

    return export


def _case(name: str):
    return pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name


MATRIX_FORMATS = [*FORMATS.names(), TRITON_E2E]
VARIANTS = ["plain", "calibrated", "knn", "conformal", "multilabel"]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", [_case(n) for n in MATRIX_FORMATS])
def test_every_format_answers_like_the_checkpoint_or_refuses_in_one_line(
    models, exported, name, variant, tmp_path
):
    from lightning_cls.export.writer import writers_of

    model, config = models[variant], _config_of(name)
    refusal = REFUSALS.get(name, {}).get(variant)
    if refusal is not None:
        out = tmp_path / "out"
        with pytest.raises(ValueError, match=refusal) as caught:
            export_model(model.net, model.spec, out, config, model.data)
        assert "\n" not in str(caught.value)
        assert not out.exists()  # refused before anything was written
        return
    paths = exported(variant, name).paths
    keys = [w.key for n in config.formats for w in writers_of(n, config)]
    assert set(keys) <= set(paths), (name, sorted(paths))
    for key in keys:
        _answers_like_the_checkpoint(model, key, paths[key])


def _answers_like_the_checkpoint(model: Model, key: str, path: Path) -> None:
    from lightning_cls.export.onnx import read_metadata

    what = f"{key} ({path.name})"
    if path.is_dir() and (path / "1" / "model.onnx").is_file():  # a Triton repository
        return _answers_like_the_checkpoint(model, key, path / "1" / "model.onnx")
    if path.suffix == ".mlpackage":  # predicts on macOS only: its decision travels
        from lightning_cls.export.coreml import read_coreml

        assert read_coreml(path).spec == model.spec, what
        return
    if path.suffix == ".onnx" and read_metadata(path).layout == "NHWC":
        return _end_to_end_answers(model, path, what)
    predictor = load_artifact(path, trust_artifact=True)
    assert predictor.spec.decision.trust() == model.spec.decision.trust(), what
    assert predictor.spec.decision.threshold == model.spec.decision.threshold, what
    rows, failures = predict_files(predictor, model.files)
    assert not failures, what
    if "int8" in key or key == "auto":  # approximate by design (auto: the fastest file
        # within the accuracy gate, INT8 or bf16 maybe): the decision travels, labels agree
        agree = np.mean([r["labels"][:1] == e["labels"][:1] for r, e in zip(rows, model.rows)])
        assert agree >= 0.75, (what, agree)
        return
    for row, expected in zip(rows, model.rows):
        _same_answer(model.spec, row, expected, what)


def _same_answer(spec: InputSpec, row: dict, expected: dict, what: str) -> None:
    """One image's answer: the labels (and ``unknown``), every probability, the score, the set."""
    where = f"{what} on {Path(expected['file']).name}"
    columns = spec.decision.rows()
    assert columns.answer(row) == columns.answer(expected), where
    probs = dict(zip(row["labels"], row["probs"]))
    wanted = dict(zip(expected["labels"], expected["probs"]))
    assert probs.keys() == wanted.keys(), where
    np.testing.assert_allclose(
        [probs[k] for k in wanted], list(wanted.values()), atol=1e-4, err_msg=where
    )
    if "all_probs" in expected:
        np.testing.assert_allclose(row["all_probs"], expected["all_probs"], atol=1e-4)
    assert row.get("unknown") == expected.get("unknown"), where
    if "score" in expected:
        assert row["score"] == pytest.approx(expected["score"], abs=1e-4), where
    assert row.get("set") == expected.get("set"), where


def _end_to_end_answers(model: Model, path: Path, what: str) -> None:
    """The e2e file (uint8 NHWC in, probabilities out), run as a server outside lightning_cls
    runs it, on the same PNGs decoded: the checkpoint's probabilities and labels."""
    from lightning_cls.export.onnx_e2e import INPUT_NAME
    from lightning_cls.inference.images import load_image_batch
    from lightning_cls.inference.runtimes import make_session

    spec = model.spec
    images, ok, bad = load_image_batch(model.files, spec.image_size, spec.num_channels)
    assert not bad and len(ok) == len(model.files)
    nhwc = np.ascontiguousarray(images.transpose(0, 2, 3, 1))  # (B, H, W, C)
    (probs,) = make_session(path).run(None, {INPUT_NAME: nhwc})
    task = spec.decision
    for p, expected in zip(probs, model.rows):
        wanted = expected.get("all_probs")
        if wanted is None:  # multi-class: the top labels with their probabilities
            wanted = [0.0] * spec.num_classes
            for label, prob in zip(expected["labels"], expected["probs"]):
                wanted[spec.classes.index(label)] = prob
        np.testing.assert_allclose(p, wanted, atol=1e-4, err_msg=what)
        indices, _ = task.decide(torch.from_numpy(p[None]), 1)
        labels = [spec.classes[i] for i in indices[0]]
        assert labels == expected["labels"][: len(labels)], what


def test_a_bf16_openvino_file_of_a_feature_rule_model_is_checked_on_both_outputs(models, tmp_path):
    """The bf16 IR is checked in f32 (``OpenVINOWriter.read_back``), on its ``features`` output
    too: the check's runner answered the logits alone, and ``export=auto`` (which times the
    bf16 candidate on a CPU with native bf16) failed for a ``reject=knn`` model."""
    model = models["knn"]
    config = ExportConfig(formats=["onnx", "openvino"], openvino={"precision": "bf16"})
    paths = export_model(model.net, model.spec, tmp_path, config).paths
    predictor = load_artifact(paths["openvino"])
    assert (
        predictor.gives_features and predictor.spec.decision.trust() == model.spec.decision.trust()
    )
    rows, _ = predict_files(predictor, model.files)
    agree = np.mean([r["labels"][:1] == e["labels"][:1] for r, e in zip(rows, model.rows)])
    assert agree >= 0.75 and all("unknown" in r for r in rows)
