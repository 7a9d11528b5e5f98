"""The tiny recipe's presets and the models trained once per test process."""

from __future__ import annotations

import hydra
import torch

from helpers import LEARNABLE, as_overrides, make_data, trained_artifacts, trained_model
from helpers.hydra_configs import compose


def test_the_overrides_compose_the_same_data_as_the_preset(tmp_path):
    """Commands that evaluate or calibrate the trained model see the data it learned."""
    cfg = compose(overrides=as_overrides(LEARNABLE), tmp=tmp_path)
    from_config = hydra.utils.instantiate(cfg.data, batch_size=LEARNABLE["batch_size"])
    preset = make_data(LEARNABLE)
    assert (from_config.val_size, from_config.spec) == (preset.val_size, preset.spec)
    a, b = from_config.load_splits(), preset.load_splits()
    for split in ("train", "test"):
        assert torch.equal(a[split].images, b[split].images), split
        assert torch.equal(a[split].labels, b[split].labels), split


def test_a_trained_model_is_built_once_per_process(trained, artifacts, tmp_path):
    assert trained_model(tmp_path / "again") is trained
    assert trained_artifacts(tmp_path / "again") is artifacts
    assert not (tmp_path / "again").exists()  # nothing trained or written a second time
