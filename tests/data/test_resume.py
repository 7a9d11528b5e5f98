"""Exact mid-run resume of the tensor pipeline through a real ImageDataModule + scheduler.

A scheduler makes ``configure_optimizers`` call ``trainer.estimated_stepping_batches``, which
builds the train loader before Lightning restores the fit loop's loader states (Lightning issue
#20550), so the loader's own ``state_dict`` is never reloaded. ``ImageDataModule`` therefore
carries the loader position in its own ``state_dict``, restored before that happens. The
augmentation is seeded per batch from the loader's position, so it is exact too.
"""

from functools import partial

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from helpers.tiny import make_data, make_module, make_trainer
from lightning_cls.data.preset import AugmentPreset
from lightning_cls.training.optim import cosine


class _Record(pl.Callback):
    def __init__(self):
        self.batches: list[tuple[list[int], float]] = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        x, y = batch  # augmented float batch
        self.batches.append((y.tolist(), round(float(x.double().sum()), 3)))


def _fit(tmp_path, ckpt_path=None, every_step=False):
    dm = make_data(
        num_classes=3,
        train_size=48,
        test_size=8,
        val_size=8,
        batch_size=8,
        augment=AugmentPreset(crop_padding=2, hflip=True),
        seed=4,
    )
    module = make_module(
        dm, "mlp", optimizer=partial(torch.optim.SGD, lr=0.1), module_kwargs=dict(scheduler=cosine)
    )
    record = _Record()
    callbacks = [record]
    if every_step:
        callbacks.append(ModelCheckpoint(tmp_path, "{step}", every_n_train_steps=1, save_top_k=-1))
    trainer = make_trainer(tmp_path, callbacks, max_epochs=2, limit_val_batches=0)
    pl.seed_everything(0)
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
    return record.batches


@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")
def test_resume_with_scheduler_sees_the_same_batches_and_augmentation(tmp_path):
    full = _fit(tmp_path, every_step=True)  # 5 batches per epoch
    assert len(full) == 10
    for step in (2, 5, 7):
        pl.seed_everything(123)  # a different global RNG must not matter
        assert _fit(tmp_path, ckpt_path=tmp_path / f"step={step}.ckpt") == full[step:]
