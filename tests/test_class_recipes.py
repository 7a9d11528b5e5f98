"""Imbalance and pictures end to end on the digits data: task.class_weights=auto with the
balanced sampler, per-class precision/recall in results.json, the per-class accuracy chart and
the prediction mosaics of train, eval and predict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from helpers.hydra_configs import QUIET_TRAINER, compose
from lightning_cls.data import DigitsDataModule
from lightning_cls.eval import evaluate
from lightning_cls.predict import predict
from lightning_cls.train import train

FAST = ["trainer.max_epochs=2", "+trainer.limit_train_batches=10"]


@pytest.fixture(scope="module")
def weighted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("weighted")
    overrides = [
        *QUIET_TRAINER,
        *FAST,
        "task.class_weights=auto",
        "task.class_weight_method=effective",
        "data.balanced_sampler=true",
    ]
    return tmp, train(compose(overrides=overrides, tmp=tmp))


def test_auto_weights_travel_in_the_checkpoint_and_results_have_per_class(weighted):
    tmp, summary = weighted
    ckpt = torch.load(summary["best_ckpt"], map_location="cpu", weights_only=False)
    weights = ckpt["hyper_parameters"]["task"]["class_weights"]
    assert len(weights) == 10 and sum(weights) == pytest.approx(10)
    results = json.loads((tmp / "run" / "results.json").read_text())
    per_class = results["per_class_test"]
    assert sorted(per_class) == [str(i) for i in range(10)]
    total = sum(c["support"] for c in per_class.values())
    recall = sum(c["recall"] * c["support"] for c in per_class.values()) / total
    assert recall == pytest.approx(results["test"]["test/acc"], abs=1e-4)  # recall = accuracy
    for name in ("per_class_accuracy.png", "confusion_matrix.png", "predictions_val.png"):
        assert (tmp / "run" / name).stat().st_size > 5000, name


def test_eval_writes_per_class_and_the_test_mosaic(weighted, tmp_path):
    _, summary = weighted
    cfg = compose("eval", [f"ckpt_path={summary['best_ckpt']}", *QUIET_TRAINER[:4]], tmp=tmp_path)
    metrics = evaluate(cfg)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert sum(c["support"] for c in results["per_class_test"].values()) > 0
    assert metrics["test/acc"] == pytest.approx(summary["test"]["test/acc"], abs=1e-4)
    assert (tmp_path / "run" / "predictions_test.png").stat().st_size > 5000


def test_predict_on_a_class_folder_writes_the_mosaic(weighted, tmp_path):
    _, summary = weighted
    dm = DigitsDataModule()
    dm.setup()
    test = dm.splits["test"]
    for i in range(12):
        folder = tmp_path / "images" / str(int(test.labels[i]))
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(test.images[i, 0].numpy()).save(folder / f"{i:02d}.png")
    mosaic = tmp_path / "mosaic.png"
    overrides = [
        f"ckpt_path={summary['best_ckpt']}",
        f"inputs={tmp_path / 'images'}",
        f"output={tmp_path / 'pred.csv'}",
        f"mosaic={mosaic}",
    ]
    rows = predict(compose("predict", overrides, tmp=tmp_path))
    assert len(rows) == 12 and Path(mosaic).stat().st_size > 5000
