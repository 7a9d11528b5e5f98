"""BatchMixer and ClassificationModule(task={"name": "multiclass", "mixup_alpha": ...})."""

from __future__ import annotations

import functools

import pytest
import torch

from helpers.tiny import make_data, make_module, make_trainer
from lightning_cls.training.mixup import BatchMixer


def test_mixer_gives_soft_targets_that_sum_to_one():
    torch.manual_seed(0)
    x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 5, (8,))
    mixed_x, soft = BatchMixer(5, mixup_alpha=0.4)(x, y)
    assert soft.shape == (8, 5) and mixed_x.shape == x.shape
    torch.testing.assert_close(soft.sum(1), torch.ones(8))
    assert (soft.max(1).values < 1).any() and not torch.equal(mixed_x, x)
    untouched = BatchMixer(5, cutmix_alpha=1.0, prob=0.0)(x, y)
    assert untouched[0] is x and untouched[1] is y


def test_mixer_refuses_bad_settings():
    with pytest.raises(ValueError, match="mixup_alpha > 0 or cutmix_alpha > 0"):
        BatchMixer(4)
    with pytest.raises(ValueError, match="mix_prob must be in \\[0, 1\\], got 1.5"):
        BatchMixer(4, mixup_alpha=0.2, prob=1.5)
    with pytest.raises(ValueError, match="must be >= 0 .*got -1.0 and 0.0"):
        BatchMixer(4, mixup_alpha=-1.0)


def test_module_mixes_training_batches_only(tmp_path):
    data = make_data(test_size=16)
    module = make_module(
        data,
        optimizer=functools.partial(torch.optim.SGD, lr=0.05),
        module_kwargs={"task": {"name": "multiclass", "mixup_alpha": 0.4, "cutmix_alpha": 1.0}},
    )
    seen = []
    module.task.criterion.register_forward_pre_hook(lambda _, args: seen.append(args[1]))
    # Lightning's sanity check kept (the factory skips it): its val batch is counted below.
    trainer = make_trainer(tmp_path, limit_val_batches=1, num_sanity_val_steps=2)
    trainer.fit(module, datamodule=data)
    soft, hard = [y for y in seen if y.ndim == 2], [y for y in seen if y.ndim == 1]
    assert len(soft) == 3 and all(y.shape == (16, 4) for y in soft)  # every train batch mixed
    assert any((y.max(1).values < 1).any() for y in soft)
    assert len(hard) == 1 + 1  # sanity-check val batch and the val batch: never mixed
    assert module.hparams.task["mixup_alpha"] == 0.4  # the setting travels in checkpoints
