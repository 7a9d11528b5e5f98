"""ImageDataModule.on_after_batch_transfer: the tensor pipeline's augmentation under a Trainer
does not depend on when Lightning fetches a batch, and follows trainer.precision."""

from __future__ import annotations

import torch

from helpers import make_trainer
from lightning_cls.data import SyntheticDataModule
from lightning_cls.data.preset import AugmentPreset


def _data() -> SyntheticDataModule:
    return SyntheticDataModule(
        num_classes=3,
        image_size=8,
        train_size=80,
        test_size=8,
        batch_size=16,
        val_size=16,
        augment=AugmentPreset(crop_padding=2, hflip=True),
        seed=5,
    )


def _attached(precision: str = "32-true") -> SyntheticDataModule:
    data = _data()
    trainer = make_trainer(precision=precision)
    trainer.training = True
    data.trainer = trainer
    return data


def test_batches_fetched_ahead_are_augmented_as_if_fetched_one_by_one():
    data = _attached()
    fetched_ahead = list(data.train_dataloader())  # the whole epoch in flight before any hook
    late = [data.on_after_batch_transfer(batch, 0) for batch in fetched_ahead]
    one_by_one = [
        data.on_after_batch_transfer(batch, 0) for batch in _attached().train_dataloader()
    ]
    outside = list(_data().train_dataloader())  # no Trainer: the loader augments itself
    assert len(late) == len(outside) == 4
    for (x_late, y_late), (x_now, _), (x_out, y_out) in zip(late, one_by_one, outside):
        torch.testing.assert_close(x_late, x_now, rtol=0, atol=0)
        torch.testing.assert_close(x_late, x_out, rtol=0, atol=0)
        assert torch.equal(y_late, y_out)
    assert not torch.equal(late[0][0], late[1][0][: len(late[0][0])])  # batches differ


def test_eval_batches_carry_no_key_and_are_not_augmented():
    data = _attached()
    data.trainer.training = False
    batch = next(iter(data.val_dataloader()))
    assert len(batch) == 2
    x, _ = data.on_after_batch_transfer(batch, 0)
    expected = data.batch_augment()(batch[0], train=False)
    torch.testing.assert_close(x, expected, rtol=0, atol=0)


def test_true_precisions_get_their_input_dtype():
    expected = {
        "bf16-true": torch.bfloat16,
        "64-true": torch.float64,
        "bf16-mixed": torch.float32,
        "32-true": torch.float32,
    }
    for precision, dtype in expected.items():
        data = _attached(precision)
        x, _ = data.on_after_batch_transfer(next(iter(data.train_dataloader())), 0)
        assert x.dtype == dtype, precision
