"""Weights that record their preprocessing refuse data that disagrees (``models/preprocessing.py``):
one line naming both, and ``allow_preprocessing_mismatch=true`` to proceed. Nothing downloads:
torchvision's and timm's records are read from their configs, checkpoints are written here."""

from __future__ import annotations

import pytest
import torch

from helpers.hydra_configs import QUIET_TRAINER, compose
from helpers.tiny import colour_photos
from lightning_cls.inference.spec import InputSpec
from lightning_cls.models import check_pretrained_preprocessing, pretrained_preprocessing

IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
TORCHVISION = {"name": "resnet18", "source": "torchvision", "weights": "DEFAULT"}


def _data(**changes) -> InputSpec:
    fields = dict(classes=["a", "b"], **IMAGENET, image_size=224, num_channels=3)
    return InputSpec(**{**fields, **changes})


def _lightning_checkpoint(path, state_dict=None, **hparams):
    """A .ckpt as a lightning_cls run writes it, as far as this check reads: its spec's keys."""
    spec = dict(classes=["x", "y"], mean=[0.5] * 3, std=[0.25] * 3, image_size=32, num_channels=3)
    state_dict = state_dict if state_dict is not None else {"net.w": torch.zeros(1)}
    torch.save({"state_dict": state_dict, "hyper_parameters": {**spec, **hparams}}, path)
    return str(path)


def test_torchvision_weights_refuse_another_mean_in_one_line_naming_both():
    with pytest.raises(ValueError, match="^The weights") as err:
        check_pretrained_preprocessing(TORCHVISION, _data(mean=(0.5, 0.5, 0.5)))
    assert str(err.value) == (
        "The weights (torchvision's resnet18 DEFAULT) were trained with mean=(0.485, 0.456, "
        "0.406), std=(0.229, 0.224, 0.225), 224 px, 3 channels; data.mean=(0.5, 0.5, 0.5) "
        "differs: set data.mean=[0.485,0.456,0.406] or pass allow_preprocessing_mismatch=true "
        "to proceed."
    )
    check_pretrained_preprocessing(TORCHVISION, _data())  # the same: nothing to say
    check_pretrained_preprocessing(TORCHVISION, _data(mean=(0.485, 0.456, 0.406001)))  # rounding
    check_pretrained_preprocessing(TORCHVISION, _data(mean=(0.5,) * 3), allow=True)  # override
    check_pretrained_preprocessing({**TORCHVISION, "weights": None}, _data(mean=(0.5,) * 3))


@pytest.mark.parametrize("value", ["no", "false", 1, None])
def test_the_override_takes_a_real_boolean_only(value):
    with pytest.raises(TypeError, match=r"^allow_preprocessing_mismatch=.* is not a boolean; set "):
        check_pretrained_preprocessing(TORCHVISION, _data(mean=(0.5,) * 3), allow=value)


def test_several_differences_are_listed_in_the_same_line():
    with pytest.raises(
        ValueError,
        match=r"; data.std=\(0.5, 0.5, 0.5\), data.image_size=64 differ: set "
        r"data.std=\[0.229,0.224,0.225\] data.image_size=224 or pass "
        r"allow_preprocessing_mismatch=true to proceed\.$",
    ):
        check_pretrained_preprocessing(TORCHVISION, _data(std=(0.5,) * 3, image_size=64))


def test_timm_weights_file_is_checked_against_timm_s_pretrained_cfg(tmp_path):
    pytest.importorskip("timm")
    path = tmp_path / "resnet18.safetensors"
    path.write_bytes(b"not read by the check")
    model = {"name": "resnet18", "source": "timm", "weights_path": str(path)}
    assert pretrained_preprocessing(model)["decode_size"] == 235  # timm's crop_pct 0.95
    with pytest.raises(
        ValueError,
        match=r"^The weights \(timm's resnet18 \(its pretrained_cfg\)\) were trained with "
        r"mean=\(0.485, 0.456, 0.406\), std=\(0.229, 0.224, 0.225\), 224 px, 3 channels; "
        r"data.image_size=32 differs: set data.image_size=224 or pass",
    ):
        check_pretrained_preprocessing(model, _data(image_size=32))


def test_a_lightning_cls_checkpoint_records_its_spec_a_bare_state_dict_nothing(tmp_path):
    ckpt = _lightning_checkpoint(tmp_path / "run.ckpt")
    model = {"name": "resnet18", "source": "torchvision", "weights_path": ckpt}
    with pytest.raises(
        ValueError,
        match=r"^The weights \(run.ckpt \(the input spec it carries\)\) were trained with "
        r"mean=\(0.5, 0.5, 0.5\), std=\(0.25, 0.25, 0.25\), 32 px, 3 channels; "
        r"data.mean=\(0.485, 0.456, 0.406\), data.std=\(0.229, 0.224, 0.225\), "
        r"data.image_size=224 differ",
    ):
        check_pretrained_preprocessing(model, _data())
    bare = tmp_path / "bare.pth"
    torch.save({"conv.weight": torch.zeros(1)}, bare)
    assert pretrained_preprocessing({**model, "weights_path": str(bare)}) is None
    check_pretrained_preprocessing({**model, "weights_path": str(bare)}, _data())


@pytest.fixture
def fine_tune(tmp_path):
    """``fine_tune(*overrides)``: train's results for mobilenet_v3_small started from a
    lightning_cls-style checkpoint (trained at 12 px with mean 0.5, std 0.25) on 12 px photos."""
    import torchvision

    from lightning_cls.train import train

    photos = colour_photos(tmp_path / "photos", per_class=8, size=12)
    weights = tmp_path / "mobilenet.ckpt"
    net = torchvision.models.mobilenet_v3_small(num_classes=3)
    state = {f"net.{k}": v for k, v in net.state_dict().items()}
    _lightning_checkpoint(weights, image_size=12, state_dict=state)

    def run(*overrides):
        cfg = compose(
            overrides=[*QUIET_TRAINER[:4], "data=imagefolder", f"data.root={photos}",
                       "data.image_size=12", "data.val_size=3", "data.test_size=3",
                       "model=torchvision", f"model.weights_path={weights}", "callbacks=none",
                       "logger=[]", "trainer.enable_checkpointing=false", "trainer.max_epochs=1",
                       "+trainer.limit_train_batches=1", "+trainer.limit_val_batches=1",
                       "test=false", "prediction_mosaic=false", *overrides],
            tmp=tmp_path,
        )  # fmt: skip
        return train(cfg)

    return run


def test_fine_tuning_fills_the_mean_from_the_checkpoint_and_refuses_an_explicit_other(fine_tune):
    with pytest.raises(ValueError, match=r"; data.mean=\(0.4, 0.4, 0.4\) differs: set data"):
        fine_tune("data.mean=[0.4,0.4,0.4]")
    filled = fine_tune()  # data.mean null: the checkpoint's, no refusal
    assert filled["val"] and filled["data_fingerprint"] is not None
    forced = fine_tune("data.mean=[0.4,0.4,0.4]", "allow_preprocessing_mismatch=true")
    assert forced["val"]  # trained (and validated) with the data's own mean
