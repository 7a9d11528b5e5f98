"""``AugmentPreset`` (data/preset.py): one augmentation object handed to the DataModule, the
``augment`` config group, and the deprecated keyword / ``data.<option>`` spellings."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from lightning_cls import config_dir
from lightning_cls.cli.renamed import AUGMENT_OPTIONS as CLI_OPTIONS
from lightning_cls.cli.renamed import renamed
from lightning_cls.data import (
    AugmentPreset,
    CIFAR10DataModule,
    DigitsDataModule,
    SyntheticDataModule,
    create_preset,
    list_presets,
)
from lightning_cls.data.preset import AUGMENT_OPTIONS

CONF = Path(config_dir())
CIFAR = {"crop_padding": 4, "hflip": True}
# What each data config (+ experiment) set as data.<option> before the augment group: the
# flags of conf/data/*.yaml and conf/experiment/*.yaml, as they were.
OLD_FLAGS = {
    ("digits", None): {},
    ("mnist", None): {},
    ("fashion_mnist", None): {},
    ("synthetic", None): {},
    ("cifar10", None): CIFAR,
    ("cifar100", None): CIFAR,
    ("imagefolder", None): CIFAR,
    ("multilabel", None): CIFAR,
    ("streaming", None): {"hflip": True},
    ("cifar10", "cifar10_fast"): {"crop_padding": 2, "hflip": True},
    ("cifar10", "cifar10_resnet18"): CIFAR,
    ("cifar10", "cifar10_simplecnn"): CIFAR,
    ("digits", "digits_simplecnn"): {},
    ("imagefolder", "finetune_imagefolder"): {
        "random_resized_crop": True,
        "crop_padding": 0,
        "hflip": True,
    },
}


def _compose(overrides: list[str], name: str = "train"):
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return compose(name, overrides=overrides)


def _overrides(data: str, experiment: str | None, tmp_path) -> list[str]:
    out = [f"experiment={experiment}"] if experiment else [f"data={data}"]
    missing = OmegaConf.load(CONF / "data" / f"{data}.yaml")
    out += [f"data.{k}={tmp_path}" for k in missing if OmegaConf.is_missing(missing, k)]
    return out


def test_every_data_config_and_experiment_is_covered():
    datasets = {p.stem for p in (CONF / "data").glob("*.yaml")} - {"_common", "custom"}
    experiments = {p.stem for p in (CONF / "experiment").glob("*.yaml")}
    assert {d for d, e in OLD_FLAGS if e is None} == datasets
    assert {e for _, e in OLD_FLAGS if e} == experiments


@pytest.mark.parametrize("data, experiment", list(OLD_FLAGS))
def test_the_preset_builds_what_the_old_flags_built(data, experiment, tmp_path):
    cfg = _compose(_overrides(data, experiment, tmp_path))
    assert (
        cfg.data._target_.split(".")[-1]
        == OmegaConf.load(CONF / "data" / f"{data}.yaml")._target_.split(".")[-1]
    )
    new = instantiate(cfg.data)
    old_flags = OLD_FLAGS[(data, experiment)]
    assert new.augment == AugmentPreset(**old_flags)
    if data == "streaming":  # its mean/std/size are read from the chunks' dataset.json
        return
    # The same config with the old keywords in place of the preset: the deprecated path.
    old_kwargs = OmegaConf.to_container(cfg.data, resolve=True)
    old_kwargs.pop("augment")
    target = old_kwargs.pop("_target_")
    old_cfg = {"_target_": target, **old_kwargs, **old_flags, "augment": "none"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = instantiate(old_cfg)
    deprecated = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecated) == (1 if old_flags else 0)  # none when no flag was set
    assert old.augment == new.augment
    # The batched (tensor) transform: the same pixels from the same draws.
    x = torch.randint(0, 256, (6, new.num_channels, *(2 * [old.resize_size or new.image_size])))
    x = x.to(torch.uint8)
    a = new.batch_augment()(x, train=True, generator=torch.Generator().manual_seed(3))
    b = old.batch_augment()(x, train=True, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    # The per-sample (PIL) transform: the same steps.
    assert repr(new.train_transform()) == repr(old.train_transform())


def test_old_flags_built_what_they_said():
    """The reference above, checked against the transforms themselves (a negative control:
    the flags change the pixels and the PIL steps)."""
    plain, cifar = AugmentPreset(), AugmentPreset(**CIFAR)
    x = torch.randint(0, 256, (8, 3, 8, 8), dtype=torch.uint8)
    a = plain.batch((0.5,) * 3, (0.25,) * 3)(x, True, torch.Generator().manual_seed(0))
    b = cifar.batch((0.5,) * 3, (0.25,) * 3)(x, True, torch.Generator().manual_seed(0))
    assert not torch.equal(a, b)
    steps = [type(t).__name__ for t in cifar.pil(8, (0.5,) * 3, (0.25,) * 3).transforms]
    assert steps == ["RandomCrop", "RandomHorizontalFlip", "ToTensor", "Normalize"]
    photo = [
        type(t).__name__ for t in create_preset("photo").pil(8, (0.5,), (0.25,), 10).transforms
    ]
    assert photo == ["RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize"]


def test_library_use_needs_no_preset():
    assert CIFAR10DataModule(batch_size=128).augment == AugmentPreset(crop_padding=4, hflip=True)
    assert DigitsDataModule().augment == AugmentPreset()
    assert DigitsDataModule(augment="crop_flip").augment == create_preset("crop_flip")
    assert DigitsDataModule(augment={"hflip": True}).augment == AugmentPreset(hflip=True)
    mine = AugmentPreset(crop_padding=1, auto_augment="trivialaugment")
    assert CIFAR10DataModule(augment=mine).augment is mine


def test_old_keywords_still_work_with_a_warning_naming_the_new_spelling():
    with pytest.warns(DeprecationWarning) as caught:
        dm = CIFAR10DataModule(hflip=False)
    message = str(caught[0].message)
    assert caught[0].filename == __file__  # points at the line that built the DataModule
    assert "CIFAR10DataModule(hflip=False) is deprecated" in message
    assert "augment=AugmentPreset(crop_padding=4)" in message  # the class default, changed
    assert "augment.hflip=false" in message
    assert dm.augment == AugmentPreset(crop_padding=4, hflip=False)
    with pytest.warns(DeprecationWarning, match=r"augment.random_resized_crop=true"):
        dm = DigitsDataModule(augment="crop_flip", random_resized_crop=True)
    assert dm.augment == AugmentPreset(crop_padding=4, hflip=True, random_resized_crop=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spelling warns about nothing
        DigitsDataModule(augment=AugmentPreset(hflip=True))


def test_an_old_run_config_still_builds_its_data(tmp_path):
    """eval/predict read the training run's saved ``data`` (.hydra/config.yaml): one written
    before the augment group holds the flags and no ``augment``."""
    cfg = _compose(["data=cifar10"], name="eval")
    old = OmegaConf.to_container(cfg.data)
    old.pop("augment")
    old.update(crop_padding=4, hflip=True, flip="random", translate_pad="zeros")
    old.update(auto_augment=None, random_erasing=0.0)
    cfg.data = OmegaConf.create(old)
    with pytest.warns(DeprecationWarning, match="augment.crop_padding=4 augment.hflip=true"):
        dm = instantiate(cfg.data)
    assert dm.augment == create_preset("crop_flip")


def test_old_command_line_keys_become_augment_keys(capsys):
    args = renamed("train", ["data=cifar10", "data.hflip=false", "+data.crop_padding=2"])
    assert args == ["data=cifar10", "augment.hflip=false", "augment.crop_padding=2"]
    err = capsys.readouterr().err
    assert "warning: data.hflip= is deprecated and will be removed; use augment.hflip=" in err
    cfg = _compose(args)
    assert instantiate(cfg.data).augment == AugmentPreset(crop_padding=2, hflip=False)
    assert renamed("stats", ["data.batch_size=8"]) == ["data.batch_size=8"]


def test_the_command_line_picks_and_changes_a_preset(tmp_path):
    cfg = _compose(["data=cifar10", "augment=none", "augment.auto_augment=randaugment"])
    assert instantiate(cfg.data).augment == AugmentPreset(auto_augment="randaugment")
    cfg = _compose(["experiment=cifar10_fast", "augment.flip=alternate"])
    assert instantiate(cfg.data).augment == AugmentPreset(2, True, flip="alternate")


def test_each_config_file_is_its_registered_preset():
    files = sorted(p.stem for p in (CONF / "augment").glob("*.yaml"))
    assert files == list_presets()
    for name in files:
        cfg = _compose([f"augment={name}"])
        assert instantiate(cfg.augment) == create_preset(name), name


def test_the_cli_knows_every_option():
    assert CLI_OPTIONS == AUGMENT_OPTIONS


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"crop_padding": -1}, ValueError, r"augment.crop_padding=-1 must be >= 0"),
        ({"crop_padding": "4"}, TypeError, r"augment.crop_padding='4' must be a whole number"),
        ({"hflip": "no"}, TypeError, r"augment.hflip='no' must be true or false"),
        ({"random_resized_crop": 1}, TypeError, r"augment.random_resized_crop=1 must be true or"),
        ({"flip": "sideways"}, ValueError, r"Unknown augment.flip='sideways'; use one of random"),
        ({"flip": "alternate"}, ValueError, r"augment.hflip=false turns flipping off; set augm"),
        ({"translate_pad": "wrap"}, ValueError, r"augment.translate_pad='wrap'; use one of zero"),
        ({"auto_augment": "randaug"}, ValueError, r"augment.auto_augment='randaug'; use one of"),
        ({"random_erasing": 1.5}, ValueError, r"augment.random_erasing=1.5 must be a probabil"),
        ({"random_erasing": "x"}, TypeError, r"augment.random_erasing='x' must be a probabili"),
    ],
)
def test_bad_options_are_named_with_the_fix(options, error, message):
    with pytest.raises(error, match=message):
        AugmentPreset(**options)
    with pytest.raises(error, match=message):  # through the DataModule, as Hydra builds it
        DigitsDataModule(augment=options)


def test_bad_augment_arguments_are_named():
    with pytest.raises(ValueError, match=r"Unknown augmentation preset 'crop_flp'\. Did you mean "):
        DigitsDataModule(augment="crop_flp")
    with pytest.raises(ValueError, match=r"Unknown augment option\(s\) hfilp; the options are"):
        DigitsDataModule(augment={"hfilp": True})
    with pytest.raises(TypeError, match=r"augment=42 must be an AugmentPreset, a preset name"):
        DigitsDataModule(augment=42)
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'hflp'"):
        DigitsDataModule(hflp=True)
    alternate = AugmentPreset(hflip=True, flip="alternate")
    with pytest.raises(ValueError, match="augment.flip=alternate needs data.pipeline=tensor"):
        SyntheticDataModule(augment=alternate, pipeline="pil")
