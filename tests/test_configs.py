"""Every option of every config group composes and instantiates."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from helpers import make_module
from helpers.hydra_configs import QUIET_TRAINER, compose
from lightning_cls import config_dir
from lightning_cls.data import ImageDataModule, SyntheticDataModule
from lightning_cls.data import registry as data_registry
from lightning_cls.models import create_model
from lightning_cls.train import train

CONF = Path(config_dir())


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_config_groups_exist():
    for group in (
        "model",
        "data",
        "optimizer",
        "scheduler",
        "trainer",
        "callbacks",
        "tuner",
        "debug",
        "logger",
        "paths",
        "hydra",
        "experiment",
        "distill",
    ):
        assert options(group), group


# Data options that are datasets: not the shared base (_common) nor the by-name loader (custom).
DATASETS = [o for o in options("data") if not o.startswith("_") and o != "custom"]
# A value unlike every default for each key of conf/data/_common.yaml.
COMMON_VALUES = {
    "batch_size": 7,
    "val_size": 0.25,
    "pipeline": "pil",
    "channels_last": True,
    "drop_last": True,
    "num_workers": 1,
    "pin_memory": False,
    "persistent_workers": True,
    "cap_threads": True,
    "seed": 3,
    "folds": 3,
    "fold": 1,
    "balanced_sampler": True,
    "expect_fingerprint": "ab" * 32,
}
# A value unlike conf/augment/none.yaml's for each option of the augment preset (the data
# configs hand it over as data.augment).
AUGMENT_VALUES = {
    "crop_padding": 2,
    "hflip": True,
    "flip": "random",  # alternate needs the tensor pipeline (pil above: refused, tested elsewhere)
    "translate_pad": "reflect",
    "random_resized_crop": True,
    "auto_augment": "randaugment",
    "random_erasing": 0.5,
}


# Common keys a data config rejects in one line (with their defaults): streamed splits are
# as written, and chunks stream in order.
UNSUPPORTED = {
    "streaming": {"folds": None, "balanced_sampler": False},
    "multilabel": {"folds": None, "balanced_sampler": False},
}


def _overrides(values: dict, group: str = "data") -> list[str]:
    def text(v) -> str:
        return "null" if v is None else str(list(v) if isinstance(v, tuple) else v).lower()

    return [f"{group}.{k}={text(v)}" for k, v in values.items()]


def required_data_keys(option: str, tmp_path) -> list[str]:
    """Values for the config's ``???`` keys (folders are read only in setup)."""
    cfg = OmegaConf.load(CONF / "data" / f"{option}.yaml")
    return [
        f"data.{key}={tmp_path}" for key in cfg if OmegaConf.is_missing(cfg, key) and key != "name"
    ]


@pytest.mark.parametrize("option", DATASETS)
def test_data_options_are_the_registered_datasets(option, tmp_path):
    cfg = compose(overrides=[f"data={option}", *required_data_keys(option, tmp_path)], tmp=tmp_path)
    dm = instantiate(cfg.data)
    assert type(dm) is data_registry.DATASETS.get(option)  # file name = registry name
    assert dm.batch_size == cfg.data.batch_size
    if option != "streaming":  # streaming reads its size from the data folder
        assert dm.image_size == cfg.data.image_size


def test_common_values_cover_the_common_schema():
    schema = set(OmegaConf.load(CONF / "data" / "_common.yaml"))
    assert set(COMMON_VALUES) | {"mean", "std", "augment"} == schema
    options = set(OmegaConf.load(CONF / "augment" / "none.yaml")) - {"_target_"}
    assert set(AUGMENT_VALUES) == options


@pytest.mark.parametrize("option", DATASETS + ["custom"])
def test_every_data_config_accepts_every_common_key(option, tmp_path, tiny_dataset):
    base = [f"data={option}", *required_data_keys(option, tmp_path)]
    if option == "custom":
        base += [f"data.name={tiny_dataset}", "data.num_channels=1", "data.image_size=8"]
    # data=streaming reads its channels from the chunks (num_channels: null): any count here.
    channels = compose(overrides=base, tmp=tmp_path).data.num_channels or 3
    values = {**COMMON_VALUES, "mean": (0.25,) * channels, "std": (0.5,) * channels}
    for key, default in UNSUPPORTED.get(option, {}).items():  # an error, never ignored
        with pytest.raises(InstantiationException, match=f"data.{key}=.* not supported"):
            instantiate(compose(overrides=base + _overrides({key: values[key]}), tmp=tmp_path).data)
        values[key] = default
    overrides = base + _overrides(values) + _overrides(AUGMENT_VALUES, "augment")
    dm = instantiate(compose(overrides=overrides, tmp=tmp_path).data)
    if isinstance(dm, ImageDataModule):  # the others may accept a key they have no use for
        assert {key: getattr(dm, key) for key in values} == values
        assert dm.augment.options() == AUGMENT_VALUES


@pytest.fixture
def tiny_dataset():
    """A plug-in-like dataset registered by name for the test, then removed."""
    name = "_test_tiny"

    @data_registry.register_dataset(name)
    def build(num_classes: int | None = None, **kwargs):
        return SyntheticDataModule(
            num_classes=num_classes or 3, train_size=40, test_size=8, **kwargs
        )

    yield name
    data_registry.DATASETS._builders.pop(name)


def test_custom_data_option_trains_on_a_registered_dataset(tmp_path, tiny_dataset):
    cfg = compose(
        overrides=[
            *QUIET_TRAINER[:4],
            "data=custom",
            f"data.name={tiny_dataset}",
            "data.num_channels=1",
            "data.image_size=8",
            "data.batch_size=8",
            "model=mlp",
            "trainer.max_epochs=1",
            "callbacks=none",
            "logger=[]",
        ],
        tmp=tmp_path,
    )
    summary = train(cfg)
    assert summary["test"]["test/acc"] > 0.5  # 3 classes: chance is 1/3
    with pytest.raises(InstantiationException, match=r"Unknown dataset 'nope'\. Known: .*digits"):
        instantiate(compose(overrides=["data=custom", "data.name=nope"], tmp=tmp_path).data)


@pytest.mark.parametrize("option", [o for o in options("model") if o != "custom"])
def test_model_options(option, tmp_path):
    cfg = compose(overrides=[f"model={option}", "data=synthetic"], tmp=tmp_path)
    kwargs = OmegaConf.to_container(cfg.model, resolve=True)
    net = create_model(kwargs.pop("name"), **kwargs)
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_custom_model_option_needs_a_name(tmp_path):
    cfg = compose(overrides=["model=custom", "model.name=mlp"], tmp=tmp_path)
    kwargs = OmegaConf.to_container(cfg.model, resolve=True)
    assert create_model(kwargs.pop("name"), **kwargs)(torch.randn(2, 1, 8, 8)).shape == (2, 10)


@pytest.mark.parametrize("option", options("optimizer"))
def test_optimizer_options(option, tmp_path):
    cfg = compose(overrides=[f"optimizer={option}"], tmp=tmp_path)
    opt = instantiate(cfg.optimizer)([torch.nn.Parameter(torch.zeros(2))])
    assert isinstance(opt, torch.optim.Optimizer)


def test_fused_adam_is_an_override_that_matches_default_adam(tmp_path):
    # docs/training.md: `+optimizer.fused=true` (torch's one-kernel CPU Adam) is opt-in; its
    # updates equal the default Adam's up to float rounding.
    def train(overrides):
        cfg = compose(overrides=overrides, tmp=tmp_path)
        torch.manual_seed(0)
        net = torch.nn.Linear(8, 3)
        start = net.weight.detach().clone()
        opt = instantiate(cfg.optimizer)(net.parameters())
        x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
        losses = []
        for _ in range(20):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert (net.weight - start).abs().max() > 1e-3  # 20 steps of lr 1e-3 moved it
        return opt, net, losses

    fused_opt, fused_net, fused_losses = train(["optimizer=adam", "+optimizer.fused=true"])
    plain_opt, plain_net, _ = train(["optimizer=adam"])
    assert fused_opt.defaults["fused"] is True and not plain_opt.defaults["fused"]
    assert fused_losses[-1] < fused_losses[0]
    torch.testing.assert_close(fused_net.weight, plain_net.weight, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("option", options("scheduler"))
def test_scheduler_options(option, tmp_path):
    cfg = compose(overrides=[f"scheduler={option}"], tmp=tmp_path)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    sched = instantiate(cfg.scheduler)(opt, total_steps=100)
    lrs = []
    for _ in range(100):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs[-1] < 0.1 * 0.5  # every schedule decays by the end


@pytest.mark.parametrize("option", options("trainer"))
def test_trainer_options(option, tmp_path):
    overrides = [f"trainer={option}"]
    if not torch.cuda.is_available() and option in ("gpu", "ddp"):
        overrides += ["trainer.accelerator=cpu", "trainer.precision=32-true"]
    cfg = compose(overrides=overrides, tmp=tmp_path)
    assert isinstance(instantiate(cfg.trainer, logger=False), pl.Trainer)


@pytest.mark.parametrize("option", options("callbacks"))
def test_callback_options(option, tmp_path):
    # Every callback file is added to the defaults as the docs say: callbacks=[default,<file>].
    cfg = compose(overrides=[f"callbacks=[default,{option}]"], tmp=tmp_path)
    callbacks = [instantiate(c) for c in (cfg.callbacks or {}).values()]
    assert all(isinstance(c, pl.Callback) for c in callbacks)


@pytest.mark.parametrize("option", options("tuner"))
def test_tuner_options(option, tmp_path):
    cfg = compose(overrides=[f"tuner={option}"], tmp=tmp_path)
    assert cfg.tuner and all(isinstance(instantiate(c), pl.Callback) for c in cfg.tuner.values())


@pytest.mark.parametrize("option", options("debug"))
def test_debug_options(option, tmp_path):
    cfg = compose(overrides=[f"debug={option}"], tmp=tmp_path)
    assert isinstance(instantiate(cfg.trainer, logger=False), pl.Trainer)


def _targets(node) -> list[str]:
    if isinstance(node, dict):
        found = [node["_target_"]] if isinstance(node.get("_target_"), str) else []
        return found + [t for value in node.values() for t in _targets(value)]
    if isinstance(node, list):
        return [t for value in node for t in _targets(value)]
    return []


def test_every_target_in_conf_resolves():
    """A misspelt ``_target_`` in any conf/ file fails here, not on a user's command line."""
    from hydra._internal.utils import _locate

    targets = {
        (path.relative_to(CONF).as_posix(), target)
        for path in sorted(CONF.rglob("*.yaml"))
        for target in _targets(OmegaConf.to_container(OmegaConf.load(path)))
    }
    assert len(targets) > 40
    unresolved = []
    for where, target in sorted(targets):
        try:
            _locate(target)
        except ImportError as err:
            unresolved.append(f"{where}: {target} ({err})")
    assert not unresolved, unresolved


@pytest.mark.parametrize("option", options("logger"))
def test_logger_options(option, tmp_path):
    if option in ("mlflow", "wandb"):
        pytest.importorskip(option)
    cfg = compose(overrides=[f"logger={option}"], tmp=tmp_path)
    loggers = [instantiate(c) for c in cfg.logger.values()]
    assert loggers and all(hasattr(lg, "log_metrics") for lg in loggers)


@pytest.mark.parametrize("option", options("experiment"))
def test_experiment_options(option, tmp_path):
    overrides = [f"experiment={option}"]
    cfg = compose(overrides=overrides, tmp=tmp_path)
    if OmegaConf.is_missing(cfg.data, "root"):  # a recipe for the user's own image folder
        overrides.append(f"data.root={_tiny_image_folder(tmp_path / 'images')}")
    if cfg.model.get("weights"):  # pretrained weights download; tests stay offline
        overrides.append("model.weights=null")
    cfg = compose(overrides=overrides, tmp=tmp_path)
    dm = instantiate(cfg.data)
    kwargs = OmegaConf.to_container(cfg.model, resolve=True)  # all of the config's options
    module = make_module(dm, kwargs.pop("name"), instantiate(cfg.optimizer), **kwargs)
    assert module.net(torch.randn(2, dm.num_channels, dm.image_size, dm.image_size)).shape == (
        2,
        dm.num_classes,
    )


@pytest.mark.parametrize("option", options("export"))
def test_export_options(option, tmp_path):
    cfg = compose(overrides=[f"export={option}"], tmp=tmp_path)
    if option in ("litert", "litert_int8"):
        from lightning_cls.export.litert import converter_python

        if converter_python() is None:  # make test does not build the converter's environment
            with pytest.raises(Exception, match="run `make venv-litert`"):
                instantiate(cfg.export)  # refused before any work, naming the fix
            return
    export = instantiate(cfg.export)
    assert export.enabled == (option not in ("none", "default"))


@pytest.mark.parametrize("option", options("distill"))
def test_distill_options(option, tmp_path):
    # Off while distill.teacher is null (train.py builds no Distiller); a teacher turns it on.
    assert compose(overrides=[f"distill={option}"], tmp=tmp_path).distill.teacher is None
    teacher = tmp_path / "teacher.ckpt"
    teacher.write_bytes(b"")
    cfg = compose(overrides=[f"distill={option}", f"distill.teacher={teacher}"], tmp=tmp_path)
    distiller = instantiate(cfg.distill)
    assert distiller.teacher == teacher and 0 <= distiller.alpha <= 1 and distiller.temperature > 0


def test_keys_that_messages_and_docs_suggest_exist(tmp_path):
    # NanGuard, OOMAdvisor, DataWaitProfiler, the data errors and docs/training.md tell users
    # to set these; Hydra rejects a key the config lacks (it would need a "+").
    cfg = compose(
        overrides=[
            "model=simplecnn",
            "model.checkpoint_activations=true",
            "trainer.precision=bf16-mixed",
            "trainer.detect_anomaly=true",
            "trainer.gradient_clip_val=1.0",
            "trainer.accumulate_grad_batches=2",
            "data.batch_size=8",
            "data.num_workers=2",
            "data.pin_memory=true",
            "data.persistent_workers=true",
            "data.pipeline=pil",
            "data.val_size=0.2",
            "optimizer.lr=0.01",
            "tuner=lr",
        ],
        tmp=tmp_path,
    )
    assert "lr_finder" in cfg.tuner
    dm = instantiate(cfg.data)
    assert dm.pin_memory and dm.persistent_workers and dm.val_size == 0.2
    kwargs = OmegaConf.to_container(cfg.model, resolve=True)
    assert create_model(kwargs.pop("name"), **kwargs).checkpoint_activations
    assert "batch_size_finder" in compose(overrides=["tuner=batch_size"], tmp=tmp_path).tuner
    compose(overrides=["model=resnet18", "model.checkpoint_activations=true"], tmp=tmp_path)


def _tiny_image_folder(root):
    """Two classes of two 40x30 RGB photos each, in ImageFolder layout (root/train/<class>)."""
    from PIL import Image

    for c, name in enumerate(["cat", "dog"]):
        (root / "train" / name).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (40, 30), (100 * c, 50 * i, 30)).save(
                root / "train" / name / f"{i}.png"
            )
    return root
