"""Prediction sets fitted by calibration (``calibration.conformal=<alpha>``): coverage on a trained tiny
model's held-out images, the rule carried by the checkpoint and the ONNX file (whose sets
equal the checkpoint's), the ``set`` column of predict's CSV and the server's ``set`` field;
bad options refused before any training."""

from __future__ import annotations

import asyncio
import csv
import json

import httpx
import numpy as np
import pytest
import torch
from PIL import Image

from helpers import SMALL, as_overrides, fit_plain_simplecnn, make_data
from helpers.hydra_configs import QUIET_TRAINER, compose
from lightning_cls.inference import InputSpec, load_artifact, predict_files, write_predictions_csv
from lightning_cls.inference import conformal as cp
from lightning_cls.training.calibration import Calibrator, calibrate


def test_test_coverage_is_within_two_points_of_the_target():
    """A SimpleCNN (plain torch, ~5 s) on 10 noisy generated classes (~60% accurate, so the
    sets are not all singletons); sets fitted on 1,000 validation images after the fitted
    temperature, measured on 1,000 test images (binomial sd of the coverage ~0.01)."""
    torch.manual_seed(0)
    data = make_data(
        num_classes=10, num_channels=1, image_size=16, train_size=2000, val_size=1000,
        test_size=1000, noise=1.6,
    )  # fmt: skip
    data.setup("fit")
    spec = data.spec
    train = data.splits["train"]
    net = fit_plain_simplecnn(train, spec, num_classes=10)
    result = calibrate(net, spec, data.splits["val"], data.splits["test"], conformal=0.1)
    m = result.metrics
    assert 0.4 < m["test_accuracy_after"] < 0.8  # a model the sets have work to do for
    assert abs(m["test_coverage"] - 0.9) <= 0.02, m
    assert 1.5 < m["test_mean_set_size"] < 6, m
    rule = result.conformal
    assert (rule["method"], rule["alpha"], rule["images"]) == ("raps", 0.1, 700)
    # Fitted on the probabilities after the temperature: the spec's task gives the same sets.
    fitted = InputSpec.from_dict({**spec.to_dict(), **result.spec_updates})
    assert fitted.decision.temperature == result.temperature != 1.0
    test = data.splits["test"]
    from lightning_cls.inference.predictor import Predictor

    probs = fitted.decision.probabilities(Predictor(net, fitted).image_logits(test.images))
    sets = fitted.decision.sets(probs)
    coverage = np.mean([y in s for s, y in zip(sets, test.labels.tolist())])
    assert coverage == pytest.approx(m["test_coverage"], abs=1e-6)
    # A smaller alpha: larger sets, higher coverage.
    strict = calibrate(net, spec, data.splits["val"], data.splits["test"], conformal=0.05)
    assert strict.metrics["test_mean_set_size"] > m["test_mean_set_size"]
    assert abs(strict.metrics["test_coverage"] - 0.95) <= 0.02, strict.metrics


@pytest.fixture(scope="module")
def conformal_run(tmp_path_factory):
    """train calibration=default calibration.conformal=0.2 export=onnx on the SMALL data (~10 s)."""
    from lightning_cls.train import train

    tmp = tmp_path_factory.mktemp("conformal_run")
    overrides = [
        *QUIET_TRAINER, *as_overrides(SMALL), "trainer.max_epochs=2", "calibration=default",
        "calibration.conformal=0.2", "export=onnx", "prediction_mosaic=false",
    ]  # fmt: skip
    summary = train(compose(overrides=overrides, tmp=tmp))
    images = tmp / "images"
    images.mkdir()
    data = make_data(SMALL)
    data.setup("test")
    for i, image in enumerate(data.splits["test"].images[:12]):
        Image.fromarray(image[0].numpy()).save(images / f"{i}.png")
    return summary, tmp / "run", images


def test_train_fits_sets_and_the_onnx_file_answers_the_same(conformal_run, tmp_path):
    from lightning_cls.export.onnx import read_metadata

    summary, run, images = conformal_run
    calibration = summary["calibration"]
    assert calibration["conformal"]["alpha"] == 0.2 and calibration["conformal"]["qhat"] > 0
    assert {"val_coverage", "val_mean_set_size", "test_coverage", "test_mean_set_size"} <= set(
        calibration
    )
    saved = json.loads((run / "results.json").read_text())["calibration"]
    assert saved["test_coverage"] == calibration["test_coverage"]
    ckpt = load_artifact(summary["best_ckpt"])
    onnx = load_artifact(run / "export" / "model.onnx")
    assert (
        read_metadata(run / "export" / "model.onnx").decision.conformal
        == ckpt.spec.decision.conformal
    )
    assert ckpt.spec.decision.conformal == calibration["conformal"]
    files = sorted(images.glob("*.png"))
    rows, _ = predict_files(ckpt, files, top_k=2)
    onnx_rows, _ = predict_files(onnx, files, top_k=2)
    assert [r["set"] for r in rows] == [r["set"] for r in onnx_rows]
    assert len({len(r["set"]) for r in rows}) > 1  # sizes differ: the cut is really compared
    assert all(r["set"] and r["set"][0] == r["labels"][0] for r in rows)  # top-1 first
    write_predictions_csv(tmp_path / "p.csv", onnx_rows, [], 2, onnx.spec)
    table = list(csv.DictReader((tmp_path / "p.csv").open()))
    assert list(table[0])[:2] == ["file", "set"]
    assert [r["set"] for r in table] == [";".join(r["set"]) for r in onnx_rows]


def test_eval_reports_the_sets_coverage_and_size_as_calibration_measured_them(
    conformal_run, tmp_path
):
    """``eval`` on the run's checkpoint: the test split's coverage and mean set size, the same
    numbers the fit-end calibration reported for that split (same images, same rule)."""
    from lightning_cls.eval import evaluate

    summary, _, _ = conformal_run
    cfg = compose("eval", [f"ckpt_path={summary['best_ckpt']}", "prediction_mosaic=false",
                           *QUIET_TRAINER[:4], *as_overrides(SMALL)], tmp_path)  # fmt: skip
    evaluate(cfg)
    sets = json.loads((tmp_path / "run" / "results.json").read_text())["sets"]
    calibration = summary["calibration"]
    assert sets == {
        "test_coverage": calibration["test_coverage"],
        "test_mean_set_size": calibration["test_mean_set_size"],
    }


def test_the_server_returns_each_images_set(conformal_run):
    from lightning_cls.serve.app import ServeApp
    from lightning_cls.serve.config import ServeConfig
    from lightning_cls.serve.metrics import ServeMetrics
    from lightning_cls.serve.page import PAGE_HTML

    _, run, images = conformal_run
    path = run / "export" / "model.onnx"
    predictor = load_artifact(path)
    app = ServeApp(ServeConfig(artifact=str(path)), predictor, ServeMetrics(), {"name": "m"})
    files = sorted(images.glob("*.png"))[:3]

    async def ask():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            headers = {"content-type": "image/png"}
            return [
                await client.post("/predict", content=f.read_bytes(), headers=headers)
                for f in files
            ]

    try:
        answers = [a.json()["predictions"][0] for a in asyncio.run(ask())]
    finally:
        app.close()
    rows, _ = predict_files(predictor, files, top_k=2)
    assert [a["set"] for a in answers] == [r["set"] for r in rows]
    assert "p.set" in PAGE_HTML and "m.spec.task.conformal" in PAGE_HTML  # the page shows it


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            ["calibration.conformal=1.5"],
            r"^calibration.conformal=1.5 is not strictly between 0 and 1",
        ),
        (["calibration.conformal=abc"], r"^calibration.conformal='abc' is not a number"),
        (
            ["calibration.conformal=0.1", "calibration.conformal_method=rasp"],
            r"^calibration.conformal_method='rasp' .*did you mean raps",
        ),
    ],
)
def test_bad_options_are_refused_before_training(tmp_path, overrides, match):
    from lightning_cls.train import train

    cfg = compose(overrides=[*QUIET_TRAINER, *as_overrides(SMALL), *overrides], tmp=tmp_path)
    with pytest.raises(ValueError, match=match):
        train(cfg)
    assert not list(tmp_path.rglob("*.ckpt"))  # nothing trained


def test_calibrate_refuses_a_bad_alpha_before_loading(tmp_path):
    from lightning_cls.calibrate import calibrate_checkpoint

    ckpt = tmp_path / "m.ckpt"
    ckpt.write_bytes(b"not read")
    cfg = compose("calibrate", [f"ckpt_path={ckpt}", "calibration.conformal=0"], tmp_path)
    with pytest.raises(
        ValueError, match=r"^calibration.conformal=0 is not strictly between 0 and 1"
    ):
        calibrate_checkpoint(cfg)


def test_a_multilabel_model_is_refused_before_training():
    from types import SimpleNamespace

    from lightning_cls.callbacks.calibration import Calibrate
    from lightning_cls.inference.tasks import create_task

    trainer = SimpleNamespace(datamodule=SimpleNamespace(splits={"val": None}))
    module = SimpleNamespace(decision=create_task("multilabel"))
    with pytest.raises(ValueError, match=r"single-label models, and this model is multi-label"):
        Calibrate(Calibrator(conformal=0.1)).setup(trainer, module, "fit")
    assert cp.DEFAULT_METHOD == "raps"
