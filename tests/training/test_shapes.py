from __future__ import annotations

import pytest
import torch

from helpers.tiny import make_data, make_module, make_trainer
from lightning_cls.callbacks import ShapeCheck
from lightning_cls.models import create_model
from lightning_cls.training.shapes import ShapeMismatchError, format_table, trace

MISMATCH = (
    r"classifier\.1 expects 4096 input features but got 3136 from features\.5 \(64×7×7\): "
    r"image_size=28 does not match the model's image_size=32"
)


def test_trace_lists_every_layer_with_shapes_and_params():
    net = create_model("simplecnn", in_channels=3, num_classes=10, image_size=32)
    records = trace(net, torch.zeros(2, 3, 32, 32))
    table = format_table(records)
    assert [r.name for r in records][:3] == ["features.0", "features.1", "features.2"]
    assert "features.5    MaxPool2d  [2, 64, 16, 16]  [2, 64, 8, 8]    0" in table
    assert "classifier.1  Linear     [2, 4096]        [2, 256]         1,048,832" in table
    assert table.endswith(
        f"total parameters in traced layers: {sum(p.numel() for p in net.parameters()):,}"
    )


def test_mismatch_names_layer_source_and_setting():
    net = create_model("simplecnn", in_channels=3, num_classes=10, image_size=32)
    with pytest.raises(ShapeMismatchError, match=MISMATCH):
        trace(net, torch.zeros(2, 3, 28, 28))
    with pytest.raises(
        ShapeMismatchError,
        match=r"features\.0 expects 3 input channels but got 1 from the input \(1×32×32\): num_channels=1",
    ):
        trace(net, torch.zeros(2, 1, 32, 32))


def test_shape_check_stops_training_before_the_first_step(tmp_path):
    data = make_data(
        num_classes=10, num_channels=3, image_size=28, train_size=32, test_size=8, val_size=8
    )
    module = make_module(data, widths=[32, 64], hidden=256, image_size=32)  # SimpleCNN defaults
    trainer = make_trainer(tmp_path, callbacks=[ShapeCheck()])
    with pytest.raises(ShapeMismatchError, match=MISMATCH):
        trainer.fit(module, datamodule=data)
    assert trainer.global_step == 0


def test_inspect_entry_point_uses_the_training_config(capsys):
    from hydra import compose, initialize_config_dir

    from lightning_cls import config_dir
    from lightning_cls.inspect_model import inspect_model

    overrides = ["data=synthetic", "data.image_size=16", "data.train_size=32", "data.batch_size=4"]
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    out = inspect_model(cfg)
    assert out.startswith("simplecnn on synthetic, batch [4, 3, 16, 16]")
    assert "classifier.1  Linear     [4, 1024]" in out
