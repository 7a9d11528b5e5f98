"""Batch augmentation: exact against torchvision's per-sample transforms, and statistically fair."""

import os

import pytest
import torch
from torchvision import transforms as T

from lightning_cls.data.augment import (
    BatchAugment,
    batch_crop,
    batch_flip_lr,
    batch_resized_crop,
    center_crop,
    normalize,
    random_flips,
    random_offsets,
    random_resized_crop_params,
)


def _images(b=8, c=3, h=32, w=32, seed=0):
    return torch.randint(
        0, 256, (b, c, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)
    )


def test_crop_matches_torchvision_random_crop_for_its_own_offsets():
    images = _images(16)
    crop = T.RandomCrop(32, padding=4)
    expected, offsets = [], []
    for i, img in enumerate(images):
        torch.manual_seed(100 + i)
        expected.append(crop(img))  # (C, H, W): torchvision's draw and crop
        torch.manual_seed(100 + i)  # replay the same draw to learn the offsets it used
        top, left, _, _ = T.RandomCrop.get_params(torch.zeros(3, 40, 40), (32, 32))
        offsets.append((top, left))
    out = batch_crop(images, 4, offsets=torch.tensor(offsets))
    assert len(set(offsets)) > 4  # the comparison covered several distinct offsets
    torch.testing.assert_close(out, torch.stack(expected), rtol=0, atol=0)


def test_crop_corner_offsets_zero_fill():
    images = torch.full((2, 1, 4, 4), 7, dtype=torch.uint8)
    out = batch_crop(images, 2, offsets=torch.tensor([[0, 0], [4, 4]]))
    assert out[0, 0, :2].eq(0).all() and out[0, 0, :, :2].eq(0).all()  # shifted down-right
    assert out[0, 0, 2:, 2:].eq(7).all()
    assert out[1, 0, 2:].eq(0).all() and out[1, 0, :2, :2].eq(7).all()  # shifted up-left


def test_flip_matches_torchvision_random_horizontal_flip():
    images = _images(16)
    flip = T.RandomHorizontalFlip(0.5)
    expected, mask = [], []
    for i, img in enumerate(images):
        torch.manual_seed(i)
        expected.append(flip(img))
        torch.manual_seed(i)
        mask.append(bool(torch.rand(1) < 0.5))  # RandomHorizontalFlip's own test
    out = batch_flip_lr(images, mask=torch.tensor(mask))
    assert 0 < sum(mask) < len(mask)
    torch.testing.assert_close(out, torch.stack(expected), rtol=0, atol=0)


def test_normalize_matches_to_tensor_and_normalize():
    images = _images(4)
    mean, std = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)
    tv = T.Compose([T.ToTensor(), T.Normalize(mean, std)])
    expected = torch.stack([tv(img.permute(1, 2, 0).numpy()) for img in images])
    torch.testing.assert_close(normalize(images, mean, std), expected, rtol=1e-6, atol=1e-6)


def test_offsets_are_uniform_chi_square():
    n, padding = 81_000, 4
    offsets = random_offsets(n, padding, torch.Generator().manual_seed(0))  # (N, 2)
    cells = offsets[:, 0] * 9 + offsets[:, 1]
    counts = torch.bincount(cells, minlength=81).double()
    expected = n / 81
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    assert chi2 < 124.8  # 80 degrees of freedom, p = 0.001
    assert offsets.min() == 0 and offsets.max() == 2 * padding


def test_crop_output_reveals_uniform_offsets():
    # Pixel values store their column (1..8), so a crop's leading zeros (padding) or its first
    # value tell the left offset it was cut at: this checks the crop path itself, not just the draw.
    n = 9_000
    cols = torch.arange(1, 9, dtype=torch.uint8).expand(n, 1, 8, 8).contiguous()  # (N, 1, 8, 8)
    out = batch_crop(cols, 4, torch.Generator().manual_seed(1))  # (N, 1, 8, 8)
    row = out[:, 0].amax(1).long()  # (N, 8): max over rows ignores vertical padding
    lead_zeros = (row == 0).long().cumprod(1).sum(1)  # (N,) padded columns on the left
    left = torch.where(lead_zeros > 0, 4 - lead_zeros, 3 + row[:, 0])  # (N,) offset in 0..8
    counts = torch.bincount(left, minlength=9).double()
    chi2 = ((counts - n / 9) ** 2 / (n / 9)).sum().item()
    assert counts.numel() == 9 and counts.min() > 0
    assert chi2 < 26.1  # 8 degrees of freedom, p = 0.001


def test_flip_frequency_is_half():
    n = 20_000
    flips = random_flips(n, 0.5, torch.Generator().manual_seed(2)).double().mean().item()
    assert abs(flips - 0.5) < 4 * (0.25 / n) ** 0.5
    images = torch.arange(2, dtype=torch.uint8).view(1, 1, 1, 2).expand(n, 1, 1, 2)  # (N, 1, 1, 2)
    out = batch_flip_lr(images.contiguous(), generator=torch.Generator().manual_seed(3))
    assert abs(out[:, 0, 0, 0].double().mean().item() - 0.5) < 4 * (0.25 / n) ** 0.5


def test_seeded_generator_makes_augment_deterministic_and_independent_of_global_rng():
    images = _images(32)
    aug = BatchAugment((0.5,) * 3, (0.25,) * 3, crop_padding=4, hflip=True)
    torch.manual_seed(0)
    first = aug(images, train=True, generator=torch.Generator().manual_seed(7))
    torch.manual_seed(123)
    again = aug(images, train=True, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    other = aug(images, train=True, generator=torch.Generator().manual_seed(8))
    assert not torch.equal(first, other)


def test_eval_mode_does_not_augment_and_keeps_layout_and_dtype():
    images = _images(4)
    aug = BatchAugment((0.5,) * 3, (0.25,) * 3, 4, True, channels_last=True, dtype="bfloat16")
    out = aug(images, train=False)
    assert out.dtype == torch.bfloat16
    assert out.is_contiguous(memory_format=torch.channels_last)
    expected = normalize(images, (0.5,) * 3, (0.25,) * 3).to(torch.bfloat16)  # rounded once
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_bad_inputs_name_the_value():
    with pytest.raises(ValueError, match="crop_padding must be >= 0, got -1"):
        BatchAugment((0.5,), (0.5,), crop_padding=-1)
    with pytest.raises(ValueError, match="Unknown input dtype 'fp8'"):
        BatchAugment((0.5,), (0.5,), dtype="fp8")
    with pytest.raises(ValueError, match=r"std values must be > 0, got \(0.0,\)"):
        BatchAugment((0.5,), (0.0,))
    with pytest.raises(TypeError, match="expects uint8 images.*float32"):
        normalize(torch.zeros(1, 1, 2, 2), (0.5,), (0.5,))
    with pytest.raises(ValueError, match="mean/std have 3/3 values but the batch has 1 channels"):
        normalize(torch.zeros(1, 1, 2, 2, dtype=torch.uint8), (0.5,) * 3, (0.5,) * 3)
    with pytest.raises(ValueError, match="flip probability must be in"):
        batch_flip_lr(_images(1), p=1.5)


# -- RandomResizedCrop and centre crop (photos cached at a decode size) -------------------------
def test_rrc_boxes_follow_torchvisions_sampler():
    from scipy.stats import ks_2samp

    n, h, w = 4000, 256, 320
    ours = random_resized_crop_params(n, h, w, generator=torch.Generator().manual_seed(0))  # (N, 4)
    torch.manual_seed(0)
    theirs = torch.tensor(
        [
            T.RandomResizedCrop.get_params(torch.zeros(1, h, w), [0.08, 1.0], [3 / 4, 4 / 3])
            for _ in range(n)
        ]
    )
    for boxes in (ours, theirs):  # every box inside the image
        assert (boxes[:, 0] >= 0).all() and (boxes[:, 0] + boxes[:, 2] <= h).all()
        assert (boxes[:, 1] >= 0).all() and (boxes[:, 1] + boxes[:, 3] <= w).all()

    def stats(b):
        b = b.double()
        area = b[:, 2] * b[:, 3] / (h * w)
        log_ratio = torch.log(b[:, 3] / b[:, 2])
        centre_y = (b[:, 0] + b[:, 2] / 2) / h
        return area, log_ratio, centre_y

    for mine, ref in zip(stats(ours), stats(theirs)):
        assert ks_2samp(mine.numpy(), ref.numpy()).pvalue > 0.001
    area = stats(ours)[0]
    assert 0.08 - 0.01 < area.min() < 0.1 and area.max() > 0.95  # the whole scale range is used


def test_rrc_fallback_is_torchvisions_central_crop():
    # No candidate can fit (ratio range 2..3 at full area): torchvision's fallback.
    boxes = random_resized_crop_params(5, 100, 100, scale=(1.0, 1.0), ratio=(2.0, 3.0))
    torch.manual_seed(0)
    expected = T.RandomResizedCrop.get_params(torch.zeros(1, 100, 100), [1.0, 1.0], [2.0, 3.0])
    assert boxes.tolist() == [list(expected)] * 5 == [[25, 0, 50, 100]] * 5


def test_resized_crop_matches_torchvision_for_its_boxes():
    images = _images(6, h=40, w=48)
    boxes = random_resized_crop_params(6, 40, 48, generator=torch.Generator().manual_seed(3))
    out = batch_resized_crop(images, boxes, 24)  # (B, C, 24, 24)
    from torchvision.transforms import functional as TF

    expected = torch.stack(
        [
            TF.resized_crop(img, *box, [24, 24], antialias=True)
            for img, box in zip(images, boxes.tolist())
        ]
    )
    # torchvision resizes uint8 through float32 and rounds; the native uint8 kernel used here
    # rounds its fixed-point sums, so a pixel may differ by one level.
    torch.testing.assert_close(out.int(), expected.int(), rtol=0, atol=1)
    assert (out.int() - expected.int()).abs().float().mean() < 0.3


def test_resized_crop_is_the_same_on_one_thread_or_several():
    images = _images(7, h=40, w=48)
    boxes = random_resized_crop_params(7, 40, 48, generator=torch.Generator().manual_seed(4))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = batch_resized_crop(images, boxes, 24)
        torch.set_num_threads(3)  # the crops split over 3 pool threads (uneven: 3 + 2 + 2)
        assert torch.equal(batch_resized_crop(images, boxes, 24), single)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_fused_crop_flip_normalize_equals_the_three_steps(dtype, threads, layout):
    images = _images(7, h=40, w=48).contiguous(memory_format=layout)
    boxes = random_resized_crop_params(7, 40, 48, generator=torch.Generator().manual_seed(5))
    flips = torch.tensor([True, False, True, True, False, False, True])
    mean, std = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        fused = batch_resized_crop(images, boxes, 24, flips, mean, std, dtype)
    finally:
        torch.set_num_threads(before)
    steps = batch_resized_crop(images, boxes, 24)
    expected = normalize(batch_flip_lr(steps, mask=flips), mean, std, dtype)
    assert fused.dtype == dtype and fused.shape == (7, 3, 24, 24)
    assert torch.equal(fused, expected)  # identical values, not merely close


def test_batch_augment_with_random_resized_crop_takes_the_fused_path_unchanged():
    """BatchAugment's fused path draws the same boxes and flips as the step-by-step one."""
    images = _images(6, h=40, w=40)
    augment = BatchAugment(
        (0.5,) * 3, (0.25,) * 3, image_size=24, hflip=True, random_resized_crop=True, crop_padding=0
    )
    out = augment(images, train=True, generator=torch.Generator().manual_seed(9))
    g = torch.Generator().manual_seed(9)
    boxes = random_resized_crop_params(6, 40, 40, generator=g)
    flips = random_flips(6, 0.5, g)
    steps = batch_flip_lr(batch_resized_crop(images, boxes, 24), mask=flips)
    assert torch.equal(out, normalize(steps, (0.5,) * 3, (0.25,) * 3))


def test_fused_normalize_checks_the_channel_count():
    boxes = torch.tensor([[0, 0, 8, 8]])
    with pytest.raises(ValueError, match="mean/std have 1/1 values but the batch has 3 channels"):
        batch_resized_crop(_images(1, h=8, w=8), boxes, 4, mean=(0.5,), std=(0.2,))
    with pytest.raises(ValueError, match="needs both mean and std"):
        batch_resized_crop(_images(1, h=8, w=8), boxes, 4, mean=(0.5,) * 3)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_gets_its_own_crop_pool():
    """A child forked after the parent used the pool inherits it without its threads; work
    handed to it there would wait forever (as in a DataLoader worker forked mid-run)."""
    from lightning_cls.data import augment

    assert augment._crop_pool(2).submit(lambda: 1).result(timeout=10) == 1
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only if the pool answers
        code = 1
        try:
            code = 0 if augment._crop_pool(2).submit(lambda: 7).result(timeout=10) == 7 else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_eval_centre_crop_matches_torchvision_center_crop():
    images = _images(4, h=37, w=37)
    augment = BatchAugment((0.5,) * 3, (0.25,) * 3, image_size=32, random_resized_crop=True)
    expected = normalize(
        torch.stack([T.CenterCrop(32)(img) for img in images]), augment.mean, augment.std
    )
    torch.testing.assert_close(augment(images, train=False), expected, rtol=0, atol=0)
    train = augment(images, train=True, generator=torch.Generator().manual_seed(0))
    assert train.shape == (4, 3, 32, 32) and not torch.equal(train, expected)


def test_rrc_bad_ranges_are_named():
    with pytest.raises(ValueError, match=r"scale=\(0.5, 0.1\)"):
        random_resized_crop_params(2, 8, 8, scale=(0.5, 0.1))
    with pytest.raises(ValueError, match="center_crop size 9 exceeds the images' 8x8"):
        center_crop(_images(1, h=8, w=8), 9)
