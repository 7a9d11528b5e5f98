"""One ``Calibrator`` (conf/calibration + the reject group's rule): its shape, the configs that
build it, the old flat keys that still reach it, and the export that runs after it by type."""

from __future__ import annotations

import inspect
import shutil
from pathlib import Path

import pytest
import yaml

from helpers.hydra_configs import compose
from lightning_cls import config_dir
from lightning_cls.cli.renamed import renamed
from lightning_cls.training.calibration import Calibrator

CONF = Path(config_dir())
# The keys every command's primary config has (what a run is called, its seed, its model):
# the only ones train.yaml and calibrate.yaml may both hold. Calibration's options live in the
# conf/calibration group instead, shared by both through their defaults lists.
COMMON_KEYS = {"defaults", "task_name", "experiment_name", "seed", "verbose", "ckpt_path"}
TTA_KEYS = {"tta_flip", "tta_translate", "tta", "tta_tolerance"}


def _top_level_keys(name: str) -> set[str]:
    return set(yaml.safe_load((CONF / f"{name}.yaml").read_text()))


def test_train_yaml_has_at_most_18_top_level_keys():
    keys = _top_level_keys("train")
    assert len(keys) <= 18, sorted(keys)
    flat = {"calibrate", "temperature_fit", "reject_keep", "conformal", "mixup", "loss", *TTA_KEYS}
    assert not keys & flat  # each is a group's option now (calibration, task, tta)


def test_train_and_calibrate_share_only_the_commands_common_keys():
    shared = _top_level_keys("train") & _top_level_keys("calibrate")
    assert shared <= COMMON_KEYS, sorted(shared - COMMON_KEYS)
    defaults = [next(iter(d)) for d in yaml.safe_load((CONF / "calibrate.yaml").read_text())[
        "defaults"] if isinstance(d, dict)]  # fmt: skip
    assert {"calibration", "reject"} <= set(defaults)


def test_fit_is_one_short_method_with_at_most_four_parameters():
    fit = Calibrator.fit
    assert len(inspect.signature(fit).parameters) <= 4  # self, net, spec, splits
    assert len(inspect.getsource(fit).splitlines()) <= 50


def test_the_commands_build_the_calibrator_from_the_group(tmp_path):
    """train's default fits nothing (calibration=none, reject=none); calibrate's fits T; the
    rule comes from the reject group, built with its options."""
    from lightning_cls.train import calibrator_of

    assert not calibrator_of(compose("train", [], tmp_path)).fits_anything
    cfg = compose("train", ["calibration=default", "reject=knn", "reject.k=7"], tmp_path)
    calibrator = calibrator_of(cfg)
    assert calibrator.temperature is True and calibrator.rule_name == "knn"
    assert calibrator.rule.k == 7 and calibrator.needs_features
    assert calibrator.diagram == tmp_path / "run" / "reliability.png"
    calibrate = compose("calibrate", ["ckpt_path=m.ckpt"], tmp_path)
    assert dict(calibrate.calibration) == dict(
        compose("train", ["calibration=default"]).calibration
    )
    with pytest.raises(ValueError, match=r"^calibration has no option 'kep'; its options: .*keep"):
        Calibrator.from_options({"kep": 0.9})


@pytest.mark.parametrize(
    ("command", "old", "new"),
    [
        ("train", "calibrate=true", "calibration=default"),
        ("train", "calibrate=false", "calibration=none"),
        ("train", "temperature_fit=ece", "calibration.temperature_fit=ece"),
        ("train", "reject_keep=0.9", "calibration.keep=0.9"),
        ("train", "conformal=0.1", "calibration.conformal=0.1"),
        ("train", "conformal_method=aps", "calibration.conformal_method=aps"),
        ("train", "reject_k=5", "reject.k=5"),
        ("train", "reject_bank=100", "reject.bank=100"),
        ("calibrate", "temperature=1.5", "calibration.temperature=1.5"),
        ("calibrate", "choose_threshold=false", "calibration.choose_threshold=false"),
        ("calibrate", "reject_keep=0.8", "calibration.keep=0.8"),
        ("train", "label_smoothing=0.1", "task.label_smoothing=0.1"),  # train.yaml's old task keys
        ("train", "mixup.mixup_alpha=0.2", "task.mixup_alpha=0.2"),
        ("train", "loss.class_weights=auto", "task.class_weights=auto"),
    ],
)
def test_an_old_calibration_key_still_works_with_one_warning(command, old, new, capsys, tmp_path):
    assert renamed(command, [old]) == [new]
    warning = capsys.readouterr().err
    assert warning == (
        f"warning: {old.split('=')[0]}= is deprecated and will be removed; use "
        f"{new.split('=')[0]}= (same meaning): {new}\n"
    )
    base = ["ckpt_path=m.ckpt"] if command == "calibrate" else []
    rule = ["reject=knn"] if old.startswith("reject_") else []  # a rule with k and bank
    composed = compose(command, [*base, *rule, *renamed(command, [old])], tmp_path)
    assert composed == compose(command, [*base, *rule, new], tmp_path)
    assert not {"calibrate", "reject_keep", "label_smoothing", "mixup", "loss"} & set(composed)


def test_export_runs_the_calibration_first_wherever_it_stands(trained, tmp_path):
    """ExportCallback before Calibrate in the list: export runs it (found by type) and the
    artifact carries the decision the module's task took from it; Calibrate's own fit-end
    hook then fits nothing again."""
    from types import SimpleNamespace

    from lightning_cls.callbacks.calibration import Calibrate
    from lightning_cls.export.callback import ExportCallback
    from lightning_cls.export.exporter import ExportConfig
    from lightning_cls.export.onnx import read_metadata
    from lightning_cls.module import ClassificationModule

    best = tmp_path / "best.ckpt"
    shutil.copy(trained.ckpt, best)
    module = ClassificationModule.load_from_checkpoint(best, map_location="cpu")
    calibrate = Calibrate(Calibrator.from_options({"keep": 0.9}, "msp"))
    export = ExportCallback(ExportConfig(formats=["onnx"]), dirpath=tmp_path / "export")
    trainer = SimpleNamespace(
        callbacks=[export, calibrate],
        checkpoint_callback=SimpleNamespace(best_model_path=str(best)),
        is_global_zero=True,
        datamodule=trained.data,
        default_root_dir=str(tmp_path),
    )
    export.on_fit_end(trainer, module)
    result = calibrate.result
    assert result is not None and result.reject["score"] == "msp"
    assert module.decision.temperature == result.temperature != 1.0
    stored = read_metadata(export.result.paths["onnx"])
    assert (stored.decision.temperature, stored.decision.reject) == (
        result.temperature,
        result.reject,
    )
    calibrate.on_fit_end(trainer, module)
    assert calibrate.result is result  # once per fit
