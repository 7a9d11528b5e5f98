from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EMAWeightAveraging

from lightning_cls.callbacks import MixupCutmix


class TargetSpy(pl.Callback):
    def __init__(self):
        self.targets = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.targets.append(batch[1])


def test_mixup_gives_soft_targets_and_trains(tiny_data, tiny_module, tiny_trainer):
    data = tiny_data()  # the uint8 tensor pipeline
    module = tiny_module(data)
    seen = []
    original = module.criterion.forward
    module.criterion.forward = lambda logits, y: (seen.append(y), original(logits, y))[1]
    trainer = tiny_trainer([MixupCutmix(mixup_alpha=0.4, cutmix_alpha=1.0)], limit_val_batches=1)
    trainer.fit(module, datamodule=data)
    train_targets = [y for y in seen if y.ndim == 2]
    assert len(train_targets) == 3  # every training batch was mixed ...
    assert all(y.shape == (16, 4) for y in train_targets)
    torch.testing.assert_close(train_targets[0].sum(1), torch.ones(16))
    assert any((y.max(1).values < 1).any() for y in train_targets)
    assert [y.ndim for y in seen if y.ndim == 1]  # ... and validation was not
    assert "training_step" not in vars(module)  # the wrapper is removed after fit


def test_mixup_needs_an_alpha():
    with pytest.raises(ValueError, match="mixup_alpha > 0 or cutmix_alpha > 0"):
        from lightning_cls.callbacks.mixup import build_mixer

        build_mixer(4, 0.0, 0.0)


def test_ema_weights_differ_from_raw_and_are_used_after_fit(tiny_data, tiny_module, tiny_trainer):
    data = tiny_data()
    module = tiny_module(data)
    ema = EMAWeightAveraging(decay=0.5)
    trainer = tiny_trainer([ema], max_epochs=2, limit_val_batches=1)
    trainer.fit(module, datamodule=data)
    averaged = ema._average_model.module.state_dict()
    for key, value in module.state_dict().items():  # after fit the module holds the average
        torch.testing.assert_close(value, averaged[key])


def test_lr_finder_saves_plot_and_suggests(tmp_path, tiny_data, tiny_module, tiny_trainer):
    from lightning_cls.callbacks import LRFinderPlot

    data = tiny_data()
    finder = LRFinderPlot(dirpath=str(tmp_path), num_training_steps=20, early_stop_threshold=None)
    trainer = tiny_trainer([finder], limit_val_batches=0, max_epochs=10)
    trainer.fit(tiny_module(data), datamodule=data)
    assert (tmp_path / "lr_finder.png").read_bytes()[:4] == b"\x89PNG"
    assert finder.suggestion is not None and finder.suggestion > 0
