"""tta=selective: TTA only below a confidence threshold chosen on validation, carried by the
checkpoint and the spec so the Predictor applies the same rule."""

import numpy as np
import pytest
import torch

from helpers.tiny import make_data, make_module, make_trainer
from lightning_cls.inference.predictor import Predictor, selective_tta, tta
from lightning_cls.inference.spec import InputSpec
from lightning_cls.inference.tta import TTA
from lightning_cls.training.selective_tta import choose_threshold


def test_threshold_is_the_least_tta_share_within_tolerance_of_full_tta():
    conf = torch.tensor([0.9, 0.1, 0.95, 0.3, 0.2])
    plain = torch.tensor([1, 0, 1, 0, 1]).bool()
    full = torch.ones(5, dtype=torch.bool)
    threshold, share, acc = choose_threshold(conf, plain, full, tolerance=0.0)
    assert (threshold, share, acc) == pytest.approx((0.6, 0.6, 1.0))  # the 3 least sure
    threshold, share, acc = choose_threshold(conf, plain, full, tolerance=0.2)
    assert (threshold, share, acc) == pytest.approx((0.15, 0.2, 0.8))  # only the first fix
    # TTA that never helps: no image gets it
    threshold, share, _ = choose_threshold(conf, plain, plain, tolerance=0.0)
    assert share == 0 and not (conf < threshold).any()
    # equal confidences cannot be split: all or none
    _, share, _ = choose_threshold(torch.full((4,), 0.5), plain[:4], full[:4], 0.0)
    assert share == 1.0


def _forward(v):  # any per-image function of the pixels, numpy or torch
    return v.reshape(len(v), -1)[:, :3] * 3


@pytest.mark.parametrize("kind", ["torch", "numpy"])
def test_selective_tta_gives_full_tta_below_the_threshold_and_one_pass_above(kind):
    x = torch.randn(6, 1, 4, 4)
    x = x.numpy() if kind == "numpy" else x
    confidence = lambda logits: logits[:, 0]  # noqa: E731
    full = tta(_forward, x, flip=True, translate=1)
    plain = _forward(x)
    logits, low = selective_tta(_forward, x, True, 1, 0.0, confidence)
    assert np.array_equal(np.asarray(low), np.asarray(plain[:, 0] < 0))
    rows = np.asarray(low)
    np.testing.assert_allclose(np.asarray(logits)[rows], np.asarray(full)[rows], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(logits)[~rows], np.asarray(plain)[~rows], rtol=1e-6)
    everyone, _ = selective_tta(_forward, x, True, 1, np.inf, confidence)
    np.testing.assert_allclose(np.asarray(everyone), np.asarray(full), rtol=1e-6)


def test_bad_tta_options_are_one_line():
    data = make_data()
    with pytest.raises(ValueError, match=r"Unknown tta.mode='some'; use one of full, selective"):
        make_module(data, module_kwargs=dict(tta={"mode": "some"}))
    with pytest.raises(ValueError, match="tta.mode=selective chooses which.*set tta.flip=true"):
        make_module(data, module_kwargs=dict(tta=TTA(mode="selective")))
    with pytest.raises(ValueError, match=r"tta.tolerance=1.5 must be an accuracy difference in"):
        TTA(flip=True, tolerance=1.5)
    with pytest.raises(ValueError, match=r"tta.flip='yes' is not a boolean; use true or false"):
        TTA(flip="yes")
    with pytest.raises(ValueError, match=r"Unknown tta option\(s\) \['flips'\]; known: flip"):
        TTA.from_value({"flips": True})


def test_module_chooses_on_validation_logs_the_share_and_the_predictor_follows(tmp_path):
    torch.manual_seed(0)
    data = make_data()
    module = make_module(
        data, module_kwargs=dict(tta=TTA(flip=True, translate=1, mode="selective"))
    )
    trainer = make_trainer(tmp_path, max_epochs=2)
    trainer.fit(module, datamodule=data)
    threshold = module.hparams["tta"]["threshold"]
    metrics = trainer.callback_metrics
    assert threshold is not None and 0.0 <= float(metrics["val/tta_share"]) <= 1.0
    trainer.test(module, datamodule=data)
    share = float(trainer.callback_metrics["test/tta_share"])
    module.eval()
    images = data.splits["test"].images
    x = data.spec.preprocess(images)
    with torch.no_grad():
        probs = module.decision.probabilities(module(x))
    expected = (probs.max(1).values < threshold).float().mean().item()
    assert share == pytest.approx(expected)
    # the checkpoint carries the threshold back; the spec carries it to the Predictor
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    saved = torch.load(path, weights_only=True)["hyper_parameters"]
    assert saved["tta"]["threshold"] == threshold
    spec = InputSpec.from_hparams(module.hparams)
    assert spec.tta.threshold == threshold
    with torch.no_grad():
        ours = module._logits(x, tta=True, stage="predict")
    predicted = Predictor(module.net, spec).image_logits(images)
    torch.testing.assert_close(predicted, ours, rtol=1e-5, atol=1e-5)
    full = Predictor(module.net, InputSpec.from_dict({**spec.to_dict(), "tta_threshold": None}))
    assert full.spec.tta == spec.tta.with_threshold(None)  # an older flat key still overrides
    if 0 < expected < 1:  # negative control: full TTA differs on the confident images
        assert not torch.allclose(full.image_logits(images), predicted)
