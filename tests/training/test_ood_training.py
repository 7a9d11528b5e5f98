"""ood_training=rotation (lightning_cls/training/ood_training/): the rotation head learns, its
loss trains the network's body, classification still learns, checkpoints keep the head and
exports drop it, ood_training=none is the plain module, and bad options are refused."""

from __future__ import annotations

import functools

import pytest
import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf

from helpers.hydra_configs import compose
from helpers.tiny import LEARNABLE, make_data, make_module, make_trainer
from lightning_cls.data import SyntheticDataModule
from lightning_cls.inference.network import network_state_dict
from lightning_cls.inference.spec import Split, normalize
from lightning_cls.module import ClassificationModule
from lightning_cls.training.ood_training import OOD_TRAINING, build_ood_training
from lightning_cls.training.ood_training.rotation import Rotation, rotate_batch
from lightning_cls.training.optim import norm_bias_groups

ROTATION = {"name": "rotation", "weight": 0.5}
EPOCHS = 4
FAST = functools.partial(torch.optim.Adam, lr=1e-2)


class Oriented(SyntheticDataModule):
    """LEARNABLE's class prototypes over a ramp that brightens towards the bottom: every image
    has a clear up, so its rotation can be told."""

    def load_splits(self):
        splits = super().load_splits()
        ramp = torch.linspace(0, 255, self.image_size).view(1, 1, -1, 1)  # (1, 1, H, 1)
        return {
            name: Split((split.images * 0.5 + ramp * 0.5).round().to(torch.uint8), split.labels)
            for name, split in splits.items()
        }


class EpochMetrics(pl.Callback):
    """Each epoch's ``keys``, read after the module logged them (its on_train_epoch_end runs
    after the callbacks')."""

    def __init__(self, *keys: str):
        self.keys, self.values = keys, {key: [] for key in keys}

    def _read(self, trainer):
        for key in self.keys:
            self.values[key].append(float(trainer.callback_metrics[key]))

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch > 0:
            self._read(trainer)

    def on_train_end(self, trainer, pl_module):
        self._read(trainer)


@pytest.fixture(scope="module")
def rotation_run(tmp_path_factory):
    """A [4, 8] SimpleCNN fit EPOCHS epochs on LEARNABLE data with ood_training=rotation;
    returns (module, data, per-epoch metrics, checkpoint path)."""
    torch.manual_seed(0)
    data = Oriented(**LEARNABLE)
    module = make_module(data, optimizer=FAST, module_kwargs={"ood_training": ROTATION})
    metrics = EpochMetrics("train/rotation_loss", "train/rotation_acc")
    trainer = make_trainer(None, [metrics], max_epochs=EPOCHS, limit_val_batches=0)
    trainer.fit(module, datamodule=data)
    path = tmp_path_factory.mktemp("rotation") / "model.ckpt"
    trainer.save_checkpoint(path)
    return module.eval(), data, metrics.values, path


def test_rotation_head_learns_above_chance(rotation_run):
    _, _, metrics, _ = rotation_run
    losses, accuracies = metrics["train/rotation_loss"], metrics["train/rotation_acc"]
    assert len(losses) == EPOCHS
    assert losses[-1] < losses[0] * 0.8, losses
    assert accuracies[-1] > 0.5, accuracies  # chance: 0.25


def test_classification_still_learns(rotation_run):
    module, data, _, _ = rotation_run
    test = data.splits["test"]
    with torch.no_grad():
        predicted = module(normalize(test.images, data.mean, data.std)).argmax(1)
    accuracy = (predicted == test.labels).float().mean().item()
    assert accuracy > 0.6, accuracy  # chance: 0.25


def test_the_rotation_loss_trains_the_network_body():
    torch.manual_seed(0)
    module = make_module(make_data(LEARNABLE), module_kwargs={"ood_training": ROTATION})
    x = torch.randn(8, 3, 16, 16)
    loss = module.ood_training.loss(module.net, x, torch.zeros(8, dtype=torch.long))
    loss.backward()
    head = module.ood_training.head.weight.grad
    body = [p.grad for name, p in module.net.named_parameters() if name.startswith("features")]
    assert head is not None and head.abs().sum() > 0
    assert body and all(g is not None for g in body), "the rotation loss is detached from the body"
    assert sum(g.abs().sum() for g in body) > 0
    # The classifier's own head takes no part in the rotation loss.
    classifier = module.net.get_submodule(module.ood_training.linear_name)
    assert classifier.weight.grad is None or classifier.weight.grad.abs().sum() == 0


def test_the_head_is_an_optimizer_group_under_param_groups_and_learns():
    torch.manual_seed(0)
    data = make_data(LEARNABLE)
    groups = functools.partial(norm_bias_groups, lr_scale=4.0)
    module = make_module(data, module_kwargs={"ood_training": ROTATION, "param_groups": groups})
    before = module.ood_training.head.weight.detach().clone()
    trainer = make_trainer(None, max_epochs=1, limit_train_batches=3, limit_val_batches=0)
    trainer.fit(module, datamodule=data)
    optimizer = trainer.optimizers[0]
    grouped = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert all(id(p) in grouped for p in module.ood_training.parameters())
    assert optimizer.param_groups[-1]["lr"] == optimizer.defaults["lr"]
    assert not torch.equal(module.ood_training.head.weight, before)


def test_checkpoint_round_trip_keeps_the_head_and_exports_drop_it(rotation_run):
    module, _, _, path = rotation_run
    loaded = ClassificationModule.load_from_checkpoint(path, strict=True)
    assert loaded.hparams["ood_training"] == ROTATION
    assert isinstance(loaded.ood_training, Rotation)
    assert torch.equal(loaded.ood_training.head.weight, module.ood_training.head.weight)
    state = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
    assert any(key.startswith("ood_training.head.") for key in state)
    bare = network_state_dict(state)
    assert bare and not any("ood_training" in key or "head." in key for key in bare), list(bare)
    assert set(bare) == set(module.net.state_dict())


def test_checkpoint_without_the_key_loads_as_none(rotation_run, tmp_path):
    _, data, _, _ = rotation_run
    module = make_module(data)
    trainer = make_trainer(None, max_epochs=1, limit_train_batches=1, limit_val_batches=0)
    trainer.fit(module, datamodule=data)
    checkpoint = {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}
    del checkpoint["hyper_parameters"]["ood_training"]  # a checkpoint from before the switch
    checkpoint["pytorch-lightning_version"] = pl.__version__
    torch.save(checkpoint, tmp_path / "old.ckpt")
    loaded = ClassificationModule.load_from_checkpoint(tmp_path / "old.ckpt", strict=True)
    assert loaded.ood_training is None and loaded.hparams["ood_training"] is None


def _train_losses(ood_training, omit: bool = False) -> list[float]:
    torch.manual_seed(0)
    data = make_data()
    kwargs = {} if omit else {"ood_training": ood_training}
    module = make_module(data, module_kwargs=kwargs)
    metrics = EpochMetrics("train/loss_epoch")
    trainer = make_trainer(None, [metrics], max_epochs=2, limit_val_batches=0)
    trainer.fit(module, datamodule=data)
    return metrics.values["train/loss_epoch"] + [float(p.sum()) for p in module.parameters()]


def test_none_is_exactly_the_module_without_the_switch():
    plain = _train_losses(None, omit=True)
    for none in (None, "none", {"name": None}, {"name": "none"}):
        assert _train_losses(none) == plain
    assert _train_losses(ROTATION)[:2] != plain[:2]  # the switch does change training


def test_hydra_composes_rotation_with_cifar10_fast_and_builds_the_module():
    from lightning_cls.train import build_module

    default = compose(overrides=["experiment=cifar10_fast"])
    assert default.ood_training.name is None
    cfg = compose(overrides=["experiment=cifar10_fast", "ood_training=rotation"])
    assert OmegaConf.to_container(cfg.ood_training) == ROTATION
    data = make_data(LEARNABLE, image_size=32, num_classes=10)
    module = build_module(cfg, data.spec, None, None)
    assert isinstance(module.ood_training, Rotation) and module.hparams["ood_training"] == ROTATION
    # One training step as the recipe runs it: channels_last and bf16 autocast.
    x = torch.randn(4, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = module.ood_training.loss(module.net, x, torch.zeros(4, dtype=torch.long))
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert module.ood_training.head.weight.grad.abs().sum() > 0


def test_rotate_batch_rotates_each_image_by_its_own_k():
    x = torch.randn(8, 2, 5, 5)
    k = torch.tensor([0, 1, 2, 3, 3, 2, 1, 0])
    out = rotate_batch(x, k)
    for i in range(8):
        assert torch.equal(out[i], torch.rot90(x[i], int(k[i]), (1, 2)))
    last = rotate_batch(x.contiguous(memory_format=torch.channels_last), k)
    assert last.is_contiguous(memory_format=torch.channels_last) and torch.equal(last, out)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"weight": -0.5}, ValueError, r"weight must be a finite number > 0, got weight=-0.5; "),
        ({"weight": "high"}, TypeError, r"ood_training.weight must be a number, got 'high'"),
        (
            {"weigth": 1.0},
            ValueError,
            r"ood_training=rotation has no option weigth; its options: weight",
        ),
    ],
)
def test_bad_options_are_refused(options, error, match):
    net = make_module().net
    with pytest.raises(error, match=match):
        build_ood_training({"name": "rotation", **options}, net)


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(
        ValueError,
        match=r"Unknown ood training 'rotate'\. Did you mean 'rotation'\? Known: outliers, rotation",
    ):
        build_ood_training({"name": "rotate"}, make_module().net)
    assert "rotation" in OOD_TRAINING


def test_non_square_images_are_refused():
    module = make_module(module_kwargs={"ood_training": ROTATION})
    x = torch.randn(2, 1, 8, 6)
    with pytest.raises(
        ValueError, match=r"must be square; these are 8x6 \(H x W\).*ood_training=none"
    ):
        module.ood_training.loss(module.net, x, torch.zeros(2, dtype=torch.long))


def test_a_network_without_a_linear_layer_is_refused():
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.Flatten())
    with pytest.raises(ValueError, match=r"Sequential has none; use ood_training=none"):
        Rotation(net)


class _Scaled(torch.nn.Module):
    """A conv body with BatchNorm, then a linear head whose output is scaled by 1/9 after
    it (airbench's ``logit_scale``)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8, momentum=0.4)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        h = torch.amax(torch.relu(self.bn(self.conv(x))), dim=(2, 3))
        return self.head(h) / 9


def test_rotation_logits_scale_as_the_class_logits_and_norms_keep_their_statistics():
    """The rotation logits get the net's own scaling after its last linear layer (unscaled,
    the rotation head out-pulled the classes 9 to 1 on cifar10_fast's features), and the
    rotated pass leaves BatchNorm's running statistics as the upright images made them."""
    torch.manual_seed(0)
    net = _Scaled().train()
    rotation = Rotation(net, weight=1.0)
    x = torch.randn(16, 3, 8, 8) * 3 + 1
    mean, var = net.bn.running_mean.clone(), net.bn.running_var.clone()
    state = torch.get_rng_state()
    loss = rotation.loss(net, x, torch.zeros(16, dtype=torch.long))
    torch.testing.assert_close(net.bn.running_mean, mean, rtol=0, atol=0)
    torch.testing.assert_close(net.bn.running_var, var, rtol=0, atol=0)
    assert net.bn.momentum == 0.4  # restored

    torch.set_rng_state(state)  # the same k as the call above
    k = torch.randint(4, (16,))
    h = torch.amax(torch.relu(net.bn(net.conv(rotate_batch(x, k)))), dim=(2, 3))
    expected = torch.nn.functional.cross_entropy(rotation.head(h) / 9, k)
    unscaled = torch.nn.functional.cross_entropy(rotation.head(h), k)
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    assert not torch.isclose(loss, unscaled, rtol=1e-3)
