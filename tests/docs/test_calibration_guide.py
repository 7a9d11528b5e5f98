"""The calibration guide's sizes of the feature rules on ``cifar10_fast`` follow from the
network the recipe builds: its feature width (``inference.network.FeatureNet``: the
penultimate features and the stem's filters), the kNN bank at ``reject.bank``'s default (conf/reject/knn.yaml) and the
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
    cfg = compose("train", ["experiment=cifar10_fast", "reject=knn"])
    model = OmegaConf.to_container(cfg.model, resolve=True)
    net = create_model(model.pop("name"), **model).eval()
    _, features = with_features(net, (3, 32, 32))(torch.zeros(1, 3, 32, 32))
    width = features.shape[1]  # 256 penultimate + 24 stem filters
    bank = cfg.reject.bank * width * 2  # float16
    text = " ".join(GUIDE.read_text().split())
    assert f"network gives {width} features" in text
    assert f"a {cfg.reject.bank} x {width} float16 bank is {bank / 1e6:.1f} MB" in text
    assert f"{len(base64.b64encode(bytes(bank))) / 1e6:.1f} MB as base64" in text
    assert f"{width * width * 4 / 1e3:.0f} KB for D = {width}" in text


def test_the_guide_counts_the_additions_it_lists():
    """Its opening names as many additions as it lists (it said 'two steps' over three)."""
    intro = GUIDE.read_text().split("\n## ", 1)[0]
    bullets = [line for line in intro.splitlines() if line.startswith("- **")]
    assert len(bullets) == 3
    assert "Three additions" in intro and "All three live" in intro
    assert "Two steps" not in intro and "Both live" not in intro


def test_benchmarks_state_the_default_simplecnn_knn_feature_width():
    """docs/benchmarks.md's kNN cost section: the default model's bank width is the width of
    the features the rule scores (256 penultimate + the stem's 32 filters = 288)."""
    cfg = compose("train")
    model = OmegaConf.to_container(cfg.model, resolve=True)
    net = create_model(model.pop("name"), **model).eval()
    shape = (cfg.data.num_channels, cfg.data.image_size, cfg.data.image_size)
    _, features = with_features(net, shape)(torch.zeros(1, *shape))
    text = " ".join((GUIDE.parents[1] / "benchmarks.md").read_text().split())
    assert f"training images' {features.shape[1]} features, k = 50" in text
