"""A new rejection score with an option of its own is one file, one registration and one YAML:
``calibrate`` fits it from the command's config, the ONNX file carries it and answers as the
checkpoint does. Nothing in the library is edited for it."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from helpers import LEARNABLE, as_overrides
from helpers.hydra_configs import compose
from lightning_cls.inference import load_artifact, load_torch_model
from lightning_cls.inference.predictor import Predictor
from lightning_cls.inference.reject_rules import REJECT_RULES

RULE = '''
"""``centroid``: the mean cosine similarity of the features to their ``top`` nearest class
centroids (an option of its own, stored in the rule)."""

import numpy as np

from lightning_cls.inference.feature_rules import FeatureRule, encode, normalized


class Centroid(FeatureRule):
    name = "centroid"
    params = ("top", "centroids")
    arrays = ("centroids",)

    def __init__(self, top: int = 1):
        if isinstance(top, bool) or not isinstance(top, int) or top < 1:
            raise ValueError(f"reject.top={top!r} is not an integer >= 1.")
        self.top = top

    def fit(self, features, labels, seed=0):
        z, labels = normalized(features), np.asarray(labels)
        centroids = np.stack([z[labels == c].mean(0) for c in np.unique(labels)])
        return {"top": self.top, "centroids": encode(normalized(centroids))}

    def check_state(self, rule, stored):
        return {"top": int(rule["top"])}

    def feature_scores(self, rule, z, stored):
        similarity = np.sort(z @ stored["centroids"].T, axis=1)
        return similarity[:, -int(rule["top"]):].mean(1).astype(np.float32)
'''


@pytest.fixture
def centroid_rule(tmp_path, monkeypatch):
    """The rule's file, its registration and its YAML (a project's own conf/reject/)."""
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "centroid_rule.py").write_text(textwrap.dedent(RULE))
    monkeypatch.syspath_prepend(str(tmp_path / "plugin"))
    REJECT_RULES.register("centroid", "centroid_rule:Centroid")
    conf = tmp_path / "conf" / "reject"
    conf.mkdir(parents=True)
    (conf / "centroid.yaml").write_text("name: centroid\ntop: 1\n")
    yield tmp_path / "conf"
    REJECT_RULES.pop("centroid")


def test_a_new_rule_with_its_own_option_is_fitted_exported_and_answered_alike(
    trained, tmp_path, centroid_rule
):
    from lightning_cls.calibrate import calibrate_checkpoint
    from lightning_cls.export import export_format

    overrides = [f"hydra.searchpath=[file://{centroid_rule}]", f"ckpt_path={trained.ckpt}",
                 "reject=centroid", "reject.top=2", "calibration.keep=0.8"]  # fmt: skip
    cfg = compose("calibrate", overrides + as_overrides(LEARNABLE), tmp_path)
    report = calibrate_checkpoint(cfg)
    net, spec = load_torch_model(report["calibrated_ckpt"])
    assert (
        spec.decision.reject["score"] == "centroid" and spec.decision.reject["top"] == 2
    )  # its option, stored
    assert spec.decision.needs_features and spec.decision.reject["keep"] == 0.8

    onnx = load_artifact(export_format("onnx", net, spec, tmp_path / "m.onnx"))
    assert onnx.spec.decision.reject == spec.decision.reject
    trained.data.setup("fit")
    images = trained.data.splits["test"].images[:32]
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (16, *images.shape[1:]), dtype=np.uint8)
    import torch

    images = torch.cat([images, torch.as_tensor(noise)])
    logits, features = Predictor(net, spec).image_features(images)
    ours = spec.decision.verdicts(logits, features)
    onnx_logits, onnx_features = onnx.image_features(images)
    theirs = onnx.spec.decision.verdicts(onnx_logits, onnx_features)
    assert [u for u, _ in ours] == [u for u, _ in theirs]
    np.testing.assert_allclose([c for _, c in ours], [c for _, c in theirs], atol=1e-4)
    assert 0 < sum(u for u, _ in ours) < len(ours)  # some unknown, some not: it can fail
    # The option is the rule's: top=1 scores the nearest centroid alone, so differently.
    one = {**spec.decision.reject, "top": 1}
    ones = REJECT_RULES.create("centroid").scores(spec.decision, logits, features, one)
    assert not np.allclose(np.asarray(ones), [c for _, c in ours])


@pytest.mark.parametrize(
    ("reject", "stored"),
    [
        ({"name": "maxlogit"}, set()),
        ({"name": "gen", "gamma": 0.5}, {"gamma"}),
        ({"name": "pnorm", "p": 3}, {"p"}),
        ({"name": "rmds"}, {"means", "precision", "background_mean", "background_precision"}),
    ],
)
def test_the_literature_scores_are_rules_answered_alike_by_torch_and_numpy(trained, reject, stored):
    """Max logit, GEN (its gamma) and RMDS are registered rules: fitted by calibrate, their
    state carried in the spec every artifact holds, scored alike from torch and numpy (what
    ONNX and OpenVINO predict with)."""
    from lightning_cls.inference import InputSpec
    from lightning_cls.training.calibration import calibrate

    net, spec = load_torch_model(trained.ckpt)
    trained.data.setup("fit")
    splits = trained.data.splits
    result = calibrate(net, spec, splits["val"], reject=reject, train=splits["train"])
    rule = result.reject
    assert set(rule) == {"score", "threshold", "keep", *stored}
    assert rule.get("gamma", 0.5) == 0.5 and rule.get("p", 3) == 3
    spec = InputSpec.from_json(
        InputSpec.from_dict({**spec.to_dict(), **result.spec_updates}).to_json()
    )
    logits, features = Predictor(net, spec).image_features(splits["test"].images[:24])
    ours = spec.decision.confidence(logits, features=features)
    numpy = spec.decision.confidence(logits.numpy(), features=features.numpy())
    np.testing.assert_allclose(np.asarray(ours), numpy, rtol=1e-4, atol=1e-5)
    assert np.ptp(numpy) > 0  # the score tells images apart
