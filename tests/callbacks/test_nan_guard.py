from __future__ import annotations

import os
import re
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_cls.callbacks import NanGuard, NonFiniteError
from lightning_cls.callbacks.nan_guard import finite_flag, newest_checkpoint


class PoisonInput(pl.Callback):
    """Fill the batch with NaN from ``step`` on (the loss becomes NaN)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step >= self.step:
            batch[0].fill_(float("nan"))


def test_nan_loss_stops_with_step_named_and_last_good_ckpt_kept(
    tmp_path, tiny_data, tiny_module, tiny_trainer
):
    ckpt = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", save_last=True, save_top_k=0, every_n_train_steps=1
    )
    trainer = tiny_trainer(
        [ckpt, NanGuard(), PoisonInput(step=2)], max_epochs=3, limit_val_batches=0
    )
    data = tiny_data()
    with pytest.raises(
        NonFiniteError,
        match=r"global step 2 \(epoch 0, batch 2\): the training loss is nan\. The last good checkpoint is .*last\.ckpt",
    ):
        trainer.fit(tiny_module(data), datamodule=data)
    last = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 2
    assert all(torch.isfinite(v).all() for v in last["state_dict"].values())


def test_nan_gradient_names_the_parameter(tiny_data, tiny_module, tiny_trainer):
    data = tiny_data()
    module = tiny_module(data)
    module.net.classifier[4].weight.register_hook(lambda g: torch.full_like(g, float("inf")))
    trainer = tiny_trainer([NanGuard()], limit_val_batches=0)
    with pytest.raises(
        NonFiniteError,
        match=r"global step 0 .*first non-finite gradient is net\.classifier\.4\.weight \(shape \(4, 16\): 0 NaN and 64 Inf of 64 values\)",
    ):
        trainer.fit(module, datamodule=data)
    assert trainer.global_step == 0  # the step was not applied


class PoisonGrad(pl.Callback):
    """One NaN in ``param``'s gradient after the backward of global step ``step``."""

    def __init__(self, param: str, step: int):
        self.param, self.step = param, step

    def on_after_backward(self, trainer, pl_module):
        if trainer.global_step == self.step:
            dict(pl_module.named_parameters())[self.param].grad.view(-1)[3] = float("nan")


@pytest.mark.parametrize("param", ["net.features.0.weight", "net.classifier.4.bias"])
def test_nan_gradient_in_a_later_epoch_is_caught_the_same_step(
    param, tiny_data, tiny_module, tiny_trainer
):
    # the parameter list NanGuard takes at each epoch's start: a NaN in the second epoch, in the
    # first layer or the last, stops that very step, before the optimizer applies it
    data = tiny_data()
    module = tiny_module(data)
    batches = len(data.train_dataloader())
    step = batches + 1  # the second batch of epoch 1
    trainer = tiny_trainer([NanGuard(), PoisonGrad(param, step)], max_epochs=3, limit_val_batches=0)
    shape = re.escape(str(tuple(dict(module.named_parameters())[param].shape)))
    with pytest.raises(
        NonFiniteError,
        match=rf"global step {step} \(epoch 1, batch 1\): the first non-finite gradient is "
        rf"{re.escape(param)} \(shape {shape}: 1 NaN and 0 Inf",
    ):
        trainer.fit(module, datamodule=data)
    assert trainer.global_step == step  # the poisoned update was not applied
    assert all(torch.isfinite(p).all() for p in module.parameters())


def test_finite_gradients_whose_norm_overflows_do_not_stop_training():
    # the fused check (a norm per gradient) overflows float32 on finite values above ~1e19;
    # the per-tensor scan behind it clears them, and a real NaN is still named
    net = torch.nn.Linear(4, 4)
    net.weight.grad = torch.full((4, 4), 3e38)
    net.bias.grad = torch.zeros(4)
    assert finite_flag([torch.ones(1)], [net.weight.grad, net.bias.grad]) is False
    guard = NanGuard()
    trainer = SimpleNamespace(
        global_step=7,
        current_epoch=1,
        fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(batch_idx=2)),
        checkpoint_callbacks=[],
    )
    guard.on_before_backward(trainer, net, torch.tensor(1.5))
    guard.on_before_optimizer_step(trainer, net, None)  # no error: every value is finite
    net.bias.grad[1] = float("nan")
    guard.on_before_backward(trainer, net, torch.tensor(1.5))
    with pytest.raises(
        NonFiniteError,
        match=r"global step 7 \(epoch 1, batch 2\): the first non-finite gradient is bias "
        r"\(shape \(4,\): 1 NaN and 0 Inf of 4 values\)",
    ):
        guard.on_before_optimizer_step(trainer, net, None)


def test_last_good_checkpoint_is_the_newest_of_every_callback(tmp_path):
    best, last, gone = tmp_path / "best.ckpt", tmp_path / "last.ckpt", tmp_path / "gone.ckpt"
    for i, path in enumerate((best, last)):
        path.write_bytes(b"x")
        os.utime(path, (1000 + i, 1000 + i))
    # The first callback (trainer.checkpoint_callback) only keeps the best; the newest file is
    # another callback's last.ckpt.
    trainer = SimpleNamespace(
        checkpoint_callbacks=[
            SimpleNamespace(last_model_path="", best_model_path=str(best)),
            SimpleNamespace(last_model_path=str(last), best_model_path=str(gone)),
        ]
    )
    assert newest_checkpoint(trainer) == str(last)
    os.utime(best, (2000, 2000))
    assert newest_checkpoint(trainer) == str(best)
    assert newest_checkpoint(SimpleNamespace(checkpoint_callbacks=[])) is None
