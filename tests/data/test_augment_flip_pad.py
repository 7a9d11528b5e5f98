"""augment.flip=alternate (airbench's derandomised flip) and augment.translate_pad=reflect."""

import pytest
import torch
import torch.nn.functional as F
from pytorch_lightning import Callback
from torchvision import transforms as T

from helpers.tiny import make_data, make_module, make_trainer
from lightning_cls.data.augment import BatchAugment, alternate_flips, batch_crop
from lightning_cls.data.preset import AugmentPreset


def test_alternate_flips_swap_every_epoch_and_start_at_a_fair_coin_per_image():
    idx = torch.arange(4000)
    first = alternate_flips(idx, 0, seed=1)
    assert 0.45 < first.float().mean() < 0.55
    assert torch.equal(alternate_flips(idx, 1, seed=1), ~first)
    assert torch.equal(alternate_flips(idx, 2, seed=1), first)
    # the same image gets the same side in whatever batch it lands
    perm = torch.randperm(4000)
    assert torch.equal(alternate_flips(idx[perm], 0, seed=1), first[perm])
    assert not torch.equal(alternate_flips(idx, 0, seed=2), first)  # the seed matters


def test_batch_augment_alternate_mirrors_exactly_the_chosen_images():
    images = torch.randint(0, 256, (8, 3, 6, 6), dtype=torch.uint8)
    augment = BatchAugment((0.0,) * 3, (1.0,) * 3, hflip=True, flip="alternate")
    idx = torch.arange(10, 18)
    for epoch in (0, 1):
        out = augment(images, train=True, indices=idx, epoch=epoch, seed=3)
        mask = alternate_flips(idx, epoch, 3)[:, None, None, None]
        expect = torch.where(mask, images.flip(-1), images).float() / 255
        torch.testing.assert_close(out, expect)
    with pytest.raises(ValueError, match="augment.flip=alternate needs each image's index"):
        augment(images, train=True)


def test_reflect_translate_matches_torchvision_reflect_padding():
    images = torch.randint(0, 256, (5, 3, 8, 8), dtype=torch.uint8)
    offsets = torch.tensor([[0, 0], [4, 4], [1, 3], [2, 0], [4, 1]])
    out = batch_crop(images, 2, offsets=offsets, pad_mode="reflect")
    for k, (top, left) in enumerate(offsets.tolist()):
        padded = T.Pad(2, padding_mode="reflect")(images[k])
        assert torch.equal(out[k], padded[:, top : top + 8, left : left + 8])
    zeros = batch_crop(images, 2, offsets=offsets)
    assert zeros[0, :, 0].eq(0).all() and not out[0, :, 0].eq(0).all()  # negative control
    assert torch.equal(F.pad(images, (2,) * 4)[:, :, :8, :8][0], zeros[0])


def test_bad_values_are_one_line_before_training():
    with pytest.raises(ValueError, match=r"Unknown augment.flip='sideways'; use one of random, a"):
        make_data(augment=AugmentPreset(hflip=True, flip="sideways"))
    with pytest.raises(ValueError, match=r"augment.translate_pad='wrap'; use one of zeros, reflec"):
        make_data(augment=AugmentPreset(translate_pad="wrap"))
    with pytest.raises(ValueError, match="augment.flip=alternate says how to flip.*hflip=true"):
        make_data(augment=AugmentPreset(flip="alternate"))
    with pytest.raises(ValueError, match="augment.flip=alternate needs data.pipeline=tensor"):
        make_data(augment=AugmentPreset(hflip=True, flip="alternate"), pipeline="pil")
    with pytest.raises(ValueError, match="translate_pad=reflect needs augment.crop_padding < the"):
        batch_crop(torch.zeros(1, 1, 4, 4, dtype=torch.uint8), 4, pad_mode="reflect")


class _Record(Callback):
    """Each training batch after the DataModule's hook: (epoch, x)."""

    def __init__(self):
        self.batches = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.batches.append((trainer.current_epoch, batch[0].clone()))


def _fit(root, epochs, ckpt=None, save=None):
    torch.manual_seed(0)
    data = make_data(augment=AugmentPreset(hflip=True, flip="alternate"))
    record = _Record()
    trainer = make_trainer(root, callbacks=[record], max_epochs=epochs)
    trainer.fit(make_module(data), datamodule=data, ckpt_path=ckpt)
    if save:
        trainer.save_checkpoint(save)
    return data, record.batches


def test_each_image_is_seen_both_ways_over_two_epochs_and_a_resume_repeats_the_flips(tmp_path):
    data, batches = _fit(tmp_path / "a", 2)
    loader = data._train_loader
    spec = data.spec
    for epoch in (0, 1):
        seen = torch.cat([x for e, x in batches if e == epoch])  # (N, C, H, W)
        raw = spec.preprocess(data.splits["train"].images[loader.indices(epoch)])
        flipped = alternate_flips(loader.indices(epoch), epoch, data.seed)
        torch.testing.assert_close(
            seen, torch.where(flipped[:, None, None, None], raw.flip(-1), raw)
        )
    # mid-run resume: epoch 1 after a restart sees the very same batches
    _fit(tmp_path / "b", 1, save=tmp_path / "one.ckpt")
    _, resumed = _fit(tmp_path / "c", 2, ckpt=tmp_path / "one.ckpt")
    assert len(resumed) == sum(e == 1 for e, _ in batches)
    for (_, x), (_, y) in zip(resumed, [b for b in batches if b[0] == 1]):
        assert torch.equal(x, y)
