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

from lightning_cls.data.synthetic import SyntheticDataModule
from lightning_cls.module import ClassificationModule
from lightning_cls.training.optim import cosine


class _Record(pl.Callback):
    def __init__(self):
        self.batches: list[tuple[list[int], float]] = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        x, y = batch  # augmented float batch
        self.batches.append((y.tolist(), round(float(x.double().sum()), 3)))


def _fit(tmp_path, ckpt_path=None, every_step=False):
    dm = SyntheticDataModule(
        3,
        1,
        8,
        train_size=48,
        test_size=8,
        val_size=8,
        batch_size=8,
        crop_padding=2,
        hflip=True,
        seed=4,
    )
    module = ClassificationModule(
        "mlp",
        {"num_classes": 3, "in_channels": 1, "image_size": 8},
        optimizer=partial(torch.optim.SGD, lr=0.1),
        scheduler=partial(cosine),
        **dm.spec,
    )
    record = _Record()
    callbacks = [record]
    if every_step:
        callbacks.append(ModelCheckpoint(tmp_path, "{step}", every_n_train_steps=1, save_top_k=-1))
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        limit_val_batches=0,
        enable_checkpointing=every_step,
        default_root_dir=tmp_path,
    )
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
