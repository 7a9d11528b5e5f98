"""Temperature scaling on validation: an over-confident model's ECE at least halves with its
accuracy unchanged; per-label temperatures for multi-label; the temperature and the rule reach
the checkpoint (``python -m lightning_cls.calibrate``, train's ``calibration=default``) and the export."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.errors import MissingConfigException
from PIL import Image

from helpers import LEARNABLE, SMALL, as_overrides, fit_plain_simplecnn, make_data
from helpers.hydra_configs import QUIET_TRAINER, compose
from lightning_cls.inference import InputSpec, load_torch_model
from lightning_cls.inference.scores import mean_average_precision
from lightning_cls.inference.spec import Split
from lightning_cls.inference.tasks import create_task
from lightning_cls.training.calibration import calibrate
from lightning_cls.training.temperature import fit_temperature


@pytest.fixture(scope="module")
def overconfident():
    """A SimpleCNN overfit (plain torch, ~2 s) on 64 hard images with 30% of the labels
    shuffled: it learns the noise, so its held-out confidence is far above its accuracy."""
    torch.manual_seed(0)
    data = make_data(
        num_classes=4, num_channels=1, image_size=16, train_size=256, test_size=256,
        val_size=128, noise=1.6,
    )  # fmt: skip
    data.setup("fit")
    spec = data.spec
    train = data.splits["train"]
    y = train.labels[:64].clone()
    noisy = torch.rand(64) < 0.3
    y[noisy] = torch.randint(0, 4, (int(noisy.sum()),))
    net = fit_plain_simplecnn(Split(train.images[:64], y), spec, num_classes=4, steps=150)
    return net, spec, data.splits


def test_temperature_scaling_halves_the_ece_of_an_overconfident_model(overconfident, tmp_path):
    net, spec, splits = overconfident
    result = calibrate(net, spec, splits["val"], splits["test"], diagram=tmp_path / "rel.png")
    m = result.metrics
    assert result.temperature > 1.5  # over-confident: the logits are softened
    assert m["test_ece_before"] > 0.2  # it really was over-confident on unseen images
    assert m["test_ece_after"] <= m["test_ece_before"] / 2
    assert m["val_ece_after"] <= m["val_ece_before"] / 2
    assert m["test_accuracy_after"] == m["test_accuracy_before"]  # argmax unchanged
    assert m["test_nll_after"] < m["test_nll_before"]
    assert (tmp_path / "rel.png").read_bytes()[:4] == b"\x89PNG"
    assert result.reject is None and result.threshold is None


def test_calibrating_on_few_validation_images_warns_once_naming_count_and_fix(
    overconfident, caplog
):
    """15 validation images fit a temperature and thresholds that are noise: one warning
    line with the count, the minimum and the fix; 128 images: none."""
    net, spec, splits = overconfident
    val = splits["val"]
    logger = "lightning_cls.training.calibration"
    with caplog.at_level("WARNING", logger=logger):
        calibrate(net, spec, Split(val.images[:15], val.labels[:15]), reject="msp")
    (record,) = [r for r in caplog.records if r.levelname == "WARNING"]
    message = record.getMessage()
    assert message.startswith("Calibrating on 15 validation images, fewer than 100: ")
    assert "data.val_size=0.2" in message and "\n" not in message
    caplog.clear()
    with caplog.at_level("WARNING", logger=logger):
        calibrate(net, spec, val)
    assert len(val) >= 100 and not [r for r in caplog.records if r.levelname == "WARNING"]


def test_calibrate_logs_a_short_summary_with_only_the_lines_that_apply(overconfident, caplog):
    """The log says T, ECE before -> after per split, the share the rejection rule keeps and
    the sets' coverage, each only when it applies; never the raw dict (results.json has it)."""
    net, spec, splits = overconfident
    logger = "lightning_cls.training.calibration"
    with caplog.at_level("INFO", logger=logger):
        full = calibrate(net, spec, splits["val"], splits["test"], reject="msp", conformal=0.1)
    (text,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Calibration")]
    m = full.metrics
    lines = text.splitlines()
    assert lines[0] == "Calibration on 128 validation images:"
    assert lines[1] == f"  temperature T = {full.temperature:.3g} (fitted: nll)"
    assert f"  ECE (val) {m['val_ece_before']:.3f} -> {m['val_ece_after']:.3f}" in lines
    assert f"  ECE (test) {m['test_ece_before']:.3f} -> {m['test_ece_after']:.3f}" in lines
    kept = f"  rejection (msp): keeps 95.0% of val, {m['test_kept']:.1%} of test; the rest"
    assert any(line.startswith(kept) for line in lines), lines
    sets = f"  prediction sets (90% target): coverage {m['val_coverage']:.1%} on val"
    assert any(line.startswith(sets) for line in lines), lines
    assert len(lines) == 6 and "{" not in text
    caplog.clear()
    with caplog.at_level("INFO", logger=logger):
        calibrate(net, spec, splits["val"], temperature=1.5)
    (text,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Calibration")]
    lines = text.splitlines()  # a set temperature, val only: no rule, no sets
    assert len(lines) == 3 and lines[1] == "  temperature T = 1.5", lines
    assert lines[2].startswith("  ECE (val) ")


def confidently_wrong(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, labels): 95% of images with labels drawn from softmax(logits) (calibrated at
    T = 1), 5% whose label is never the predicted class, a logit of 8 against 0. The NLL
    pays those few a lot, so its temperature softens the other 95% (under-confident)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, 5, generator=g) * 2.5
    labels = torch.multinomial(torch.softmax(logits, 1), 1, generator=g).squeeze(1)
    wrong = torch.rand(n, generator=g) < 0.05
    logits[wrong] = 0.0
    logits[wrong, (labels[wrong] + 1) % 5] = 8.0
    return logits, labels


def test_temperature_fit_ece_rescales_nll_temperature_to_lower_held_out_ece():
    from lightning_cls.training.temperature import expected_calibration_error, rescale_for_ece

    task = create_task("multiclass")
    (val, val_y), (test, test_y) = confidently_wrong(4000, 0), confidently_wrong(4000, 1)
    nll_t = fit_temperature(val, val_y, task)
    ece_t = rescale_for_ece(val, val_y, task, nll_t)

    def ece(t):
        return expected_calibration_error(torch.softmax(test / t, 1), test_y, task)

    assert nll_t > 1.5 and ece_t < 1.2  # the NLL softens (1.69); the ECE fit undoes it (1.02)
    assert ece(ece_t) < 0.5 * ece(nll_t), (nll_t, ece_t, ece(nll_t), ece(ece_t))  # 0.07, 0.18


class FixedLogits(torch.nn.Module):
    """A "network" answering each image with a row of ``logits``: image ``i`` (uint8, one
    channel, 2 x 2) carries ``i`` in its first two pixels, and the spec normalises with mean 0
    and std 1 (``x / 255``), so ``calibrate`` sees exactly the constructed logits."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.register_buffer("logits", logits)

    def forward(self, x):  # (B, 1, 2, 2) -> (B, K)
        pixels = torch.round(torch.flatten(x, 1) * 255).long()  # (B, 4)
        return self.logits[pixels[:, 0] + 256 * pixels[:, 1]]

    @staticmethod
    def images(n: int) -> torch.Tensor:
        index = torch.arange(n)
        images = torch.zeros(n, 1, 2, 2, dtype=torch.uint8)  # (N, 1, 2, 2)
        images[:, 0, 0, 0], images[:, 0, 0, 1] = index % 256, index // 256
        return images


def test_calibrate_with_temperature_fit_ece_rescales_the_nll_temperature():
    """``calibrate(temperature_fit="ece")``, the fit behind the guide's ECE figures: on logits
    whose NLL temperature (1.69) leaves 95% of the images under-confident, the ECE fit lands
    near 1 and its validation ECE is well below the NLL fit's; the NLL's is recorded beside."""
    logits, labels = confidently_wrong(4000, 0)
    net = FixedLogits(logits)
    spec = InputSpec(classes=list("abcde"), mean=[0.0], std=[1.0], image_size=2, num_channels=1)
    val = Split(FixedLogits.images(len(logits)), labels)
    nll = calibrate(net, spec, val, temperature_fit="nll")
    ece = calibrate(net, spec, val, temperature_fit="ece")
    assert nll.temperature == fit_temperature(logits, labels, create_task("multiclass")) > 1.5
    assert ece.metrics["temperature_fit"] == "ece"
    assert ece.metrics["temperature_nll"] == nll.temperature  # rescaled from the NLL's
    assert ece.temperature < 1.2, ece.temperature  # 1.02: the rescale undid the softening
    m, n = ece.metrics, nll.metrics
    assert m["val_ece_after"] < 0.5 * n["val_ece_after"], (m, n)
    assert m["val_accuracy_after"] == n["val_accuracy_after"]  # argmax unchanged


def test_binned_ece_equals_torchmetrics_ece():
    from lightning_cls.training.temperature import binned_ece, expected_calibration_error

    task = create_task("multiclass")
    logits, labels = confidently_wrong(3000, 2)
    probs = torch.softmax(logits / 1.3, 1)
    confidence, correct = task.calibration.reliability(probs, labels)
    expected = expected_calibration_error(probs, labels, task)  # torchmetrics, 15 bins
    assert binned_ece(confidence, correct, 15) == pytest.approx(expected, abs=1e-6)
    assert binned_ece(confidence, correct, 10) != pytest.approx(expected, abs=1e-6)


def test_temperature_fit_auto_is_ece_for_a_label_smoothed_model(overconfident):

    net, spec, splits = overconfident
    plain = calibrate(net, spec, splits["val"])
    assert plain.metrics["temperature_fit"] == "nll" and "temperature_nll" not in plain.metrics
    smoothed = calibrate(net, spec.with_decision(label_smoothing=0.2), splits["val"])
    assert smoothed.metrics["temperature_fit"] == "ece"
    assert smoothed.metrics["temperature_nll"] == plain.temperature  # then rescaled from it
    forced = calibrate(net, spec, splits["val"], temperature_fit="ece")
    assert forced.temperature == smoothed.temperature
    assert forced.metrics["val_ece_after"] <= plain.metrics["val_ece_after"] + 1e-6
    with pytest.raises(ValueError, match=r"temperature_fit='ECE' is not one of auto, nll, ece"):
        calibrate(net, spec, splits["val"], temperature_fit="ECE")


def test_multilabel_gets_one_temperature_per_label():
    """Labels drawn from sigmoid(z); label 0's logits given 3x too large, label 1's as they
    are: the fit finds about [3, 1], and each label's ranking (mAP) is unchanged."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(4000, 2, generator=g) * 2
    labels = (torch.rand(4000, 2, generator=g) < torch.sigmoid(z)).float()
    logits = z * torch.tensor([3.0, 1.0])
    temperatures = fit_temperature(logits, labels, create_task("multilabel"))
    assert temperatures == pytest.approx([3.0, 1.0], rel=0.15)
    spec = InputSpec(
        classes=["a", "b"], mean=[0.5], std=[0.5], image_size=4, num_channels=1,
        task={"name": "multilabel", "temperature": temperatures},
    )  # fmt: skip
    calibrated = spec.decision.probabilities(logits)
    assert mean_average_precision(calibrated, labels) == pytest.approx(
        mean_average_precision(torch.sigmoid(logits), labels),
        abs=1e-4,  # float32 ties
    )
    with pytest.raises(ValueError, match=r"temperature has 3 values but the model has 2 labels"):
        InputSpec.from_dict({**spec.to_dict(), "temperature": [1.0, 2.0, 3.0]})


def test_the_calibrate_command_writes_a_new_checkpoint(trained, tmp_path):
    from lightning_cls.calibrate import calibrate_checkpoint

    before = hashlib.sha256(trained.ckpt.read_bytes()).hexdigest()
    overrides = [f"ckpt_path={trained.ckpt}", "reject=msp", "calibration.keep=0.9"]
    report = calibrate_checkpoint(
        compose("calibrate", overrides + as_overrides(LEARNABLE), tmp_path)
    )
    assert hashlib.sha256(trained.ckpt.read_bytes()).hexdigest() == before  # untouched
    out = Path(report["calibrated_ckpt"])
    assert out == tmp_path / "run" / "calibrated.ckpt"
    _, spec = load_torch_model(out)
    assert spec.decision.temperature == report["calibration"]["temperature"] > 0
    assert spec.decision.reject["score"] == "msp" and spec.decision.reject["keep"] == 0.9
    results = json.loads((tmp_path / "run" / "results.json").read_text())["calibration"]
    assert {"val_ece_before", "val_ece_after", "test_ece_before", "test_ece_after"} <= set(results)
    assert (tmp_path / "run" / "reliability.png").is_file()
    # eval ood=<folder> (short for ood.far=): AUROC of known vs. odd images, the rule's false accepts
    from lightning_cls.eval import evaluate

    odd = tmp_path / "odd"
    odd.mkdir()
    g = np.random.default_rng(0)
    for i in range(12):  # uniform noise: nothing like the prototypes the model learned
        Image.fromarray(g.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(odd / f"{i}.png")
    cfg = compose("eval", [f"ckpt_path={out}", f"ood={odd}", "prediction_mosaic=false",
                           *QUIET_TRAINER[:4], *as_overrides(LEARNABLE)], tmp_path / "e")  # fmt: skip
    evaluate(cfg)
    ood = json.loads((tmp_path / "e" / "run" / "results.json").read_text())["ood"]["odd"]
    assert (ood["kind"], ood["score"], ood["ood_images"], ood["known_images"]) == (
        "far", "msp", 12, 64,
    )  # fmt: skip
    assert ood["threshold"] == spec.decision.reject["threshold"]
    assert ood["auroc"] > 0.75 and 0 <= ood["false_accept_rate"] < 0.6, ood  # 0.87 here
    assert 0.7 <= ood["known_kept"] <= 1.0
    bad = compose("calibrate", [f"ckpt_path={trained.ckpt}", "calibration.keep=1.5"], tmp_path)
    with pytest.raises(
        ValueError, match=r"^calibration.keep=1.5 is not a share strictly between 0"
    ):
        calibrate_checkpoint(bad)
    # a rule is a config group (conf/reject/<name>.yaml): Hydra names the unknown one and the known
    with pytest.raises(MissingConfigException, match=r"'reject/odin'[\s\S]*knn[\s\S]*msp"):
        compose("calibrate", [f"ckpt_path={trained.ckpt}", "reject=odin"], tmp_path)
    bad = compose(
        "calibrate", [f"ckpt_path={trained.ckpt}", "calibration.temperature_fit=mse"], tmp_path
    )
    with pytest.raises(
        ValueError, match=r"^calibration.temperature_fit='mse' is not one of auto, nll, ece"
    ):
        calibrate_checkpoint(bad)


def test_train_with_calibrate_carries_it_into_checkpoint_and_export(tmp_path):
    from lightning_cls.export.onnx import read_metadata
    from lightning_cls.train import train

    overrides = [
        *QUIET_TRAINER, *as_overrides(SMALL), "trainer.max_epochs=2", "calibration=default",
        "reject=energy", "export=onnx", "prediction_mosaic=false", "calibration.temperature_fit=ece",
    ]  # fmt: skip
    summary = train(compose(overrides=overrides, tmp=tmp_path))
    calibration = summary["calibration"]
    assert calibration["temperature_fit"] == "ece" and calibration["temperature_nll"] > 0
    assert calibration["val_ece_after"] <= calibration["val_ece_before"] + 1e-6
    _, spec = load_torch_model(summary["best_ckpt"])
    assert spec.decision.temperature == calibration["temperature"]
    assert spec.decision.reject == calibration["reject"]
    stored = read_metadata(tmp_path / "run" / "export" / "model.onnx")
    assert (stored.decision.temperature, stored.decision.reject) == (
        spec.decision.temperature,
        spec.decision.reject,
    )
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["calibration"]["temperature"] == spec.decision.temperature


def test_calibrate_without_validation_images_fails_before_training():
    from types import SimpleNamespace

    from lightning_cls.callbacks.calibration import Calibrate

    trainer = SimpleNamespace(datamodule=SimpleNamespace(splits={}))
    with pytest.raises(ValueError, match=r"need the validation images in memory .*SimpleNamespace"):
        Calibrate().setup(trainer, None, "fit")


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("reject.k=0", r"reject.k=0 is not an integer >= 1"),
        ("reject.bank=10", r"reject.k=50 is larger than the feature bank \(10 training"),
        (
            "calibration.temperature_fit=ECE",
            r"^calibration.temperature_fit='ECE' is not one of auto, nll, ece",
        ),
    ],
)
def test_train_refuses_a_bad_rule_before_training(tmp_path, override, match):
    from lightning_cls.train import train

    overrides = [
        *QUIET_TRAINER,
        *as_overrides(SMALL),
        "trainer.max_epochs=1",
        "reject=knn",
        override,
    ]
    with pytest.raises(ValueError, match=match):
        train(compose(overrides=overrides, tmp=tmp_path))
    assert not list(tmp_path.rglob("*.ckpt"))  # nothing trained


def test_train_with_reject_knn_fits_the_bank_on_train_features(tmp_path):
    from lightning_cls.train import train

    overrides = [*QUIET_TRAINER, *as_overrides(SMALL), "trainer.max_epochs=1", "reject=knn",
                 "reject.k=5", "reject.bank=24", "prediction_mosaic=false"]  # fmt: skip
    summary = train(compose(overrides=overrides, tmp=tmp_path))
    rule = summary["calibration"]["reject"]
    assert rule["score"] == "knn" and rule["k"] == 5 and rule["bank"].startswith("<float16 24x")
    _, spec = load_torch_model(summary["best_ckpt"])
    assert spec.decision.reject["bank"]["shape"][0] == 24 and spec.decision.needs_features


def test_calibrate_temperature_takes_a_number_or_refuses_the_value(trained, tmp_path):
    from lightning_cls.calibrate import calibrate_checkpoint

    cfg = compose("calibrate", [f"ckpt_path={trained.ckpt}", "calibration.temperature=1.5",
                                *as_overrides(LEARNABLE)], tmp_path)  # fmt: skip
    report = calibrate_checkpoint(cfg)["calibration"]
    assert report["temperature"] == 1.5  # set, not fitted
    _, spec = load_torch_model(tmp_path / "run" / "calibrated.ckpt")
    assert spec.decision.temperature == 1.5
    for bad, shown in (("hot", "'hot'"), ("0", "0"), ("-1", "-1")):
        cfg = compose(
            "calibrate", [f"ckpt_path={trained.ckpt}", f"calibration.temperature={bad}"], tmp_path
        )
        with pytest.raises(
            ValueError, match=rf"^calibration.temperature={shown} is not true, false or a num"
        ):
            calibrate_checkpoint(cfg)
