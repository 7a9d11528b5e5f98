"""The calibration guide's sizes of the feature rules on ``cifar10_fast`` follow from the
network the recipe builds: its feature width (``inference.network.FeatureNet``: the
penultimate features and the stem's filters), the kNN bank at ``reject_bank``'s default and the
Mahalanobis precision matrix."""

from __future__ import annotations

import base64
from pathlib import Path

import torch
from omegaconf import OmegaConf

from helpers.hydra_configs import compose
from lightning_cls.inference.network import with_features
from lightning_cls.models import create_model

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "calibration.md"


def test_the_guide_states_cifar10_fast_feature_width_and_the_rules_sizes():
    cfg = compose("train", ["experiment=cifar10_fast"])
    model = OmegaConf.to_container(cfg.model, resolve=True)
    net = create_model(model.pop("name"), **model).eval()
    _, features = with_features(net, (3, 32, 32))(torch.zeros(1, 3, 32, 32))
    width = features.shape[1]  # 256 penultimate + 24 stem filters
    bank = cfg.reject_bank * width * 2  # float16
    text = " ".join(GUIDE.read_text().split())
    assert f"network gives {width} features" in text
    assert f"a {cfg.reject_bank} x {width} float16 bank is {bank / 1e6:.1f} MB" in text
    assert f"{len(base64.b64encode(bytes(bank))) / 1e6:.1f} MB as base64" in text
    assert f"{width * width * 4 / 1e3:.0f} KB for D = {width}" in text
