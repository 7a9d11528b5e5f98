"""BackboneFinetuning: frozen backbone (BatchNorm statistics too) for N epochs, then a lower LR."""

import functools

import pytest
import torch
from pytorch_lightning.callbacks import Callback
from torch import nn

from helpers import make_module
from lightning_cls.callbacks.finetune import BackboneFinetuning
from lightning_cls.training.optim import cosine


def _net(classes=4):
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(1),
        nn.Linear(4, classes),
    )


def _module(data, scheduler=None):
    sgd = functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9)
    net = _net(data.num_classes)
    return make_module(data, optimizer=sgd, module_kwargs={"net": net, "scheduler": scheduler})


class _Snapshots:
    """Backbone/BN/head tensors at the end of every training epoch."""

    def __init__(self):
        self.epochs = []

    def __call__(self, module):
        net = module.net
        self.epochs.append(
            {
                "conv": net[0].weight.detach().clone(),
                "bn_mean": net[1].running_mean.clone(),
                "head": net[5].weight.detach().clone(),
            }
        )


def test_backbone_frozen_then_unfrozen_at_lower_lr(tiny_data, tiny_trainer):
    data = tiny_data()
    module = _module(data, scheduler=functools.partial(cosine, warmup_steps=2))
    start = {
        "conv": module.net[0].weight.detach().clone(),
        "bn_mean": module.net[1].running_mean.clone(),
    }
    snaps = _Snapshots()
    finetune = BackboneFinetuning(unfreeze_at_epoch=2, backbone_lr_scale=0.1)

    class Hook(Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            snaps(pl_module)

    trainer = tiny_trainer(callbacks=[finetune, Hook()], max_epochs=3, limit_val_batches=1)
    trainer.fit(module, datamodule=data)

    assert finetune.head == "5"  # the last Linear of the Sequential
    # Epochs 0 and 1: conv weights and BN running statistics untouched; the head learned.
    for epoch in (0, 1):
        torch.testing.assert_close(snaps.epochs[epoch]["conv"], start["conv"], rtol=0, atol=0)
        torch.testing.assert_close(snaps.epochs[epoch]["bn_mean"], start["bn_mean"], rtol=0, atol=0)
    assert not torch.equal(snaps.epochs[1]["head"], snaps.epochs[0]["head"])
    # Epoch 2: the backbone trains, BatchNorm statistics move again.
    assert not torch.equal(snaps.epochs[2]["conv"], start["conv"])
    assert not torch.equal(snaps.epochs[2]["bn_mean"], start["bn_mean"])
    # Two param groups; the scheduler drives both, the backbone at 0.1x throughout.
    groups = trainer.optimizers[0].param_groups
    assert len(groups) == 2
    assert groups[1]["lr"] == pytest.approx(0.1 * groups[0]["lr"])
    assert groups[1]["initial_lr"] == pytest.approx(0.01)
    assert groups[0]["lr"] < 0.1  # the cosine decay reached both groups


def test_same_lr_and_no_freeze_is_plain_training(tiny_data, tiny_trainer):
    data = tiny_data()
    module = _module(data)
    before = module.net[0].weight.detach().clone()
    trainer = tiny_trainer(callbacks=[BackboneFinetuning(0, 1.0)], max_epochs=1)
    trainer.fit(module, datamodule=data)
    assert len(trainer.optimizers[0].param_groups) == 1
    assert not torch.equal(module.net[0].weight, before)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"unfreeze_at_epoch": -1}, "unfreeze_at_epoch must be >= 0"),
        ({"backbone_lr_scale": 0.0}, r"backbone_lr_scale must be in \(0, 1\]"),
    ],
)
def test_bad_settings_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BackboneFinetuning(**kwargs)


def test_unknown_head_is_named(tiny_data, tiny_trainer):
    data = tiny_data()
    trainer = tiny_trainer(callbacks=[BackboneFinetuning(head="fc")], max_epochs=1)
    with pytest.raises(ValueError, match="No head module 'fc' in Sequential; set head="):
        trainer.fit(_module(data), datamodule=data)


def test_ddp_without_find_unused_parameters_is_refused_before_any_step():
    from types import SimpleNamespace

    from pytorch_lightning.strategies import DDPStrategy

    callback = BackboneFinetuning(unfreeze_at_epoch=1)
    plain = SimpleNamespace(strategy=DDPStrategy())
    with pytest.raises(ValueError, match="trainer.strategy=ddp_find_unused_parameters_true"):
        callback.setup(plain, None, "fit")
    callback.setup(SimpleNamespace(strategy=DDPStrategy(find_unused_parameters=True)), None, "fit")
    BackboneFinetuning(unfreeze_at_epoch=0).setup(plain, None, "fit")  # never freezes: fine
