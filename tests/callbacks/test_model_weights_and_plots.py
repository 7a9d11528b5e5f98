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
    module.hparams["tta"] = {"flip": True}  # the matrix counts the logits test/acc scores
    with caplog.at_level(logging.INFO, logger="lightning_cls"):
        results = trainer.test(module, datamodule=data)[0]
    assert set(plots.figures) == {"confusion_matrix.png", "per_class_accuracy.png"}  # the task's
    matrix = module.test_confusion.compute()
    assert matrix.shape == (4, 4) and int(matrix.sum()) == 32  # every test image once
    assert float(matrix.diag().sum() / 32) == pytest.approx(results["test/acc"])
    _assert_png(tmp_path / "curves.png")
    _assert_png(tmp_path / "confusion_matrix.png")
    assert "class_0" in caplog.text and "accuracy  support" in caplog.text


def _regions(pixels, rgb):
    """Bounding box (top, bottom, left, right) of the rows and columns with at least 20 pixels
    of exactly colour ``rgb`` (a cell or a bar; not the colour bar's 15-pixel-wide band)."""
    import numpy as np

    mask = (pixels == rgb).all(-1)  # (H, W)
    rows, columns = np.nonzero(mask.sum(1) >= 20)[0], np.nonzero(mask.sum(0) >= 20)[0]
    assert len(rows) and len(columns), f"no region of colour {rgb}"
    return rows.min(), rows.max(), columns.min(), columns.max()


@pytest.mark.parametrize("k", [2, 25])
def test_confusion_cells_sit_where_the_matrix_puts_them_with_counts_up_to_20_classes(tmp_path, k):
    import numpy as np
    from matplotlib import colormaps

    from lightning_cls.figures.plots import plot_confusion

    matrix = torch.eye(k, dtype=torch.long) * 10
    matrix[1] = 0
    matrix[1, 0], matrix[1, 1] = 3, 7  # row 1 normalized: 0.3 predicted 0, 0.7 right
    plot_confusion(matrix, [f"c{i}" for i in range(k)], tmp_path / "cm.png")
    with Image.open(tmp_path / "cm.png") as image:
        pixels = np.asarray(image.convert("RGB"))
    blues = colormaps["Blues"]
    colour = {v: tuple((np.asarray(blues(v)[:3]) * 255).astype(np.uint8)) for v in (0.3, 0.7)}
    top3, bottom3, left3, right3 = _regions(pixels, colour[0.3])  # cell (1, 0)
    top7, bottom7, left7, right7 = _regions(pixels, colour[0.7])  # cell (1, 1)
    assert abs(top3 - top7) <= 1 and left7 > right3  # same row, predicted 1 right of 0
    cell = pixels[top7 : bottom7 + 1, left7 : right7 + 1]
    glyph = (cell != colour[0.7]).any(-1)  # (h, w): the count "7", drawn up to 20 classes
    if k <= 20:  # in white over a cell > 0.5: lighter than the cell
        assert glyph.sum() > 10 and cell[glyph].sum(-1).mean() > sum(map(int, colour[0.7])) + 100
    else:
        assert not glyph.any()


def test_per_class_bars_are_as_long_as_the_accuracy_and_red_under_half(tmp_path):
    import numpy as np

    from lightning_cls.figures.plots import plot_per_class_accuracy

    matrix = torch.tensor([[8, 0], [3, 1]])  # class a: 100%, class b: 25%
    plot_per_class_accuracy(matrix, ["a", "b"], tmp_path / "bars.png")
    with Image.open(tmp_path / "bars.png") as image:
        pixels = np.asarray(image.convert("RGB"))
    top_a, _, left_a, right_a = _regions(pixels, (31, 119, 180))  # tab:blue
    top_b, _, left_b, right_b = _regions(pixels, (214, 39, 40))  # tab:red
    assert top_b > top_a and left_a == left_b  # b's bar under a's, both from 0
    assert (right_b - left_b + 1) / (right_a - left_a + 1) == pytest.approx(0.25, abs=0.01)
    spine = pixels[top_a + 5, right_a + 1 : right_a + 3].sum(-1)  # 100% reaches the frame
    assert spine.min() < 200
