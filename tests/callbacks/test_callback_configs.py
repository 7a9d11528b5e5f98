"""Every conf/callbacks and conf/tuner option composes and instantiates."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_cls import config_dir


@pytest.mark.parametrize(
    "overrides",
    [
        ["callbacks=default"],
        ["callbacks=compile"],
        ["callbacks=ema"],
        ["callbacks=swa"],
        ["callbacks=clip"],
        ["callbacks=debug"],
        ["callbacks=[ema,clip]"],
        ["tuner=lr"],
        ["tuner=batch_size"],
    ],
)
def test_callback_configs_instantiate(overrides):
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose(
            "train", overrides=overrides + ["paths.output_dir=/tmp/out"], return_hydra_config=True
        )
    callbacks = {name: instantiate(c) for name, c in cfg.callbacks.items()}
    assert isinstance(callbacks["model_checkpoint"], ModelCheckpoint)
    extra = overrides[0].split("=")[1].strip("[]").split(",")[0]
    expected = {
        "compile": "compile",
        "ema": "ema",
        "swa": "swa",
        "clip": "gradient_clipping",
        "debug": "grad_norm",
        "lr": "lr_finder",
        "batch_size": "batch_size_finder",
    }
    if extra in expected:
        assert expected[extra] in callbacks
