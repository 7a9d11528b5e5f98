from __future__ import annotations

import logging

import pytest
import torch
from PIL import Image
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_cls.callbacks import SaveModelWeights, TrainingPlots
from lightning_cls.models import create_model


def test_model_weights_next_to_best_ckpt_load_into_create_model(
    tmp_path, tiny_data, tiny_module, tiny_trainer
):
    data = tiny_data()
    module = tiny_module(data)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val/acc", mode="max")
    trainer = tiny_trainer([ckpt, SaveModelWeights()], max_epochs=2)
    trainer.fit(module, datamodule=data)
    weights = tmp_path / "ckpt" / "model_weights.pt"
    assert weights.is_file()
    net = create_model("simplecnn", **module.hparams.model_kwargs)
    net.load_state_dict(torch.load(weights, weights_only=True))  # strict: every key matches
    best = torch.load(ckpt.best_model_path, weights_only=True)["state_dict"]
    torch.testing.assert_close(net.features[0].weight, best["net.features.0.weight"])


def test_model_weights_json_makes_the_weights_self_describing(
    tmp_path, tiny_data, tiny_module, tiny_trainer
):
    import json

    from lightning_cls.inference import load_artifact

    data = tiny_data()
    module = tiny_module(data)
    trainer = tiny_trainer([SaveModelWeights()], max_epochs=1, enable_checkpointing=False)
    trainer.fit(module, datamodule=data)
    weights = next(tmp_path.rglob("model_weights.pt"))
    meta = json.loads(weights.with_suffix(".json").read_text())
    assert meta["model_name"] == "simplecnn" and meta["classes"] == list(data.classes)
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / weights.name).write_bytes(weights.read_bytes())
    (alone / "model_weights.json").write_text(weights.with_suffix(".json").read_text())
    predictor = load_artifact(alone / "model_weights.pt")  # no .ckpt beside it, no model name given
    x = torch.randint(
        0, 256, (3, data.num_channels, data.image_size, data.image_size), dtype=torch.uint8
    )
    assert list(predictor.spec.classes) == list(data.classes)
    module.eval()
    with torch.no_grad():
        expected = module.net(data.batch_augment()(x, train=False)).softmax(1)
    torch.testing.assert_close(predictor.predict_images(x), expected, atol=1e-5, rtol=1e-4)


def _assert_png(path, min_size=(300, 200)):
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.size[0] >= min_size[0] and image.size[1] >= min_size[1]


def test_curves_and_confusion_matrix_are_written(
    tmp_path, tiny_data, tiny_module, tiny_trainer, caplog
):
    data = tiny_data()
    module = tiny_module(data)
    plots = TrainingPlots()
    trainer = tiny_trainer([plots], max_epochs=2)
    trainer.fit(module, datamodule=data)
    assert [row["epoch"] for row in plots.history] == [0, 1]
    assert {"train/loss_epoch", "val/acc", "train/acc"} <= set(plots.history[0])
    assert {"train/loss_epoch", "val/acc", "train/acc"} <= set(plots.history[1])
    # Each row holds its own epoch's train accuracy (logged after the callbacks' epoch end).
    logged = trainer.logged_metrics["train/acc"].item()
    assert plots.history[1]["train/acc"] == pytest.approx(logged)
    module.hparams.tta_flip = True  # the matrix counts the logits test/acc scores
    with caplog.at_level(logging.INFO, logger="lightning_cls"):
        results = trainer.test(module, datamodule=data)[0]
    assert plots.matrix.shape == (4, 4) and int(plots.matrix.sum()) == 32  # every test image once
    assert float(plots.matrix.diag().sum() / 32) == pytest.approx(results["test/acc"])
    _assert_png(tmp_path / "curves.png")
    _assert_png(tmp_path / "confusion_matrix.png")
    assert "class_0" in caplog.text and "accuracy  support" in caplog.text
