"""RandAugment / TrivialAugmentWide / AutoAugment(CIFAR10) / RandomErasing on uint8 batches:
each op equals torchvision v2's for the same magnitude, and the per-sample draws give the same
output distribution as torchvision's transforms applied sample by sample."""

import pytest
import torch
from scipy.stats import ks_2samp
from torchvision.transforms import v2

from lightning_cls.data import autoaugment as A
from lightning_cls.data.augment import BatchAugment, normalize
from lightning_cls.data.preset import AugmentPreset


def _images(n=6, c=3, h=20, w=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, generator=g)
    x[:, :, 5:12, 6:14] = 40  # a flat patch: shears/rotations/equalize have structure to move
    return x


MAGNITUDES = {
    "ShearX": (-0.99, -0.3, 0.0, 0.2, 0.99),
    "ShearY": (-0.99, -0.3, 0.2, 0.99),
    "TranslateX": (-32.0, -7.9, 4.0, 10.9),
    "TranslateY": (-10.9, 4.0, 32.0),
    "Rotate": (-135.0, -90.0, -12.0, 0.0, 30.0, 90.0, 180.0),
    "Brightness": (-0.99, -0.3, 0.0, 0.55, 0.99),
    "Color": (-0.99, -0.3, 0.55, 0.99),
    "Contrast": (-0.99, -0.3, 0.55, 0.99),
    "Sharpness": (-0.99, -0.3, 0.55, 0.99),
    "Posterize": (0.0, 2.0, 4.0, 7.0, 8.0),
    "Solarize": (0.0, 0.3, 0.5, 1.0),
    "AutoContrast": (0.0,),
    "Equalize": (0.0,),
    "Invert": (0.0,),
    "Identity": (0.0,),
}


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("op", A.OPS)
def test_each_op_equals_torchvisions_for_its_magnitude(op, channels):
    images = _images(c=channels)
    if channels == 1:
        images[:2] = 0  # flat images: autocontrast/equalize's no-op branch
    tv = v2.AutoAugment()  # its op dispatcher is the one every v2 policy calls
    for mag in MAGNITUDES[op]:
        ours = A.OP_FUNCTIONS[op](images, torch.full((len(images),), mag, dtype=torch.float64))
        m = int(mag) if op == "Posterize" else mag
        theirs = torch.stack(
            [
                tv._apply_image_or_video_transform(img, op, m, tv.interpolation, tv._fill)
                for img in images
            ]
        )
        assert ours.dtype == torch.uint8 and ours.shape == images.shape
        diff = (ours.int() - theirs.int()).abs()
        # Blends round their float32 sums to uint8: torchvision's fused multiply-add can land a
        # pixel one level away on a .0 boundary.
        assert diff.max() <= 1, (op, mag)
        assert (diff > 0).float().mean() < 0.01, (op, mag)


def test_ops_use_each_samples_own_magnitude():
    images = _images(4)
    mags = torch.tensor([0.0, 10.0, -5.0, 3.0], dtype=torch.float64)
    batched = A.translate_x(images, mags)
    for i in range(4):
        assert torch.equal(batched[i : i + 1], A.translate_x(images[i : i + 1], mags[i : i + 1]))
    assert torch.equal(batched[0], images[0])


def _stats(batch: torch.Tensor) -> list[torch.Tensor]:
    x = batch.double().flatten(1)
    return [x.mean(1), x.std(1), (x[:, ::7] > 128).double().mean(1)]


@pytest.mark.parametrize(
    "policy, reference",
    [
        ("randaugment", v2.RandAugment()),
        ("trivialaugment", v2.TrivialAugmentWide()),
        ("autoaugment_cifar10", v2.AutoAugment(v2.AutoAugmentPolicy.CIFAR10)),
    ],
)
def test_policy_output_distribution_matches_torchvision_v2(policy, reference):
    n = 3000
    image = _images(1, h=16, w=16, seed=1)[0]
    batch = image.expand(n, -1, -1, -1).contiguous()
    ours = A.auto_augment(batch, policy, torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    theirs = torch.stack([reference(image) for _ in range(n)])
    for mine, ref in zip(_stats(ours), _stats(theirs)):
        assert ks_2samp(mine.numpy(), ref.numpy()).pvalue > 0.001
    # How often the image is left unchanged (Identity, zero magnitudes, skipped ops) agrees.
    same_ours = (ours == image).flatten(1).all(1).double().mean()
    same_theirs = (theirs == image).flatten(1).all(1).double().mean()
    assert abs(same_ours - same_theirs) < 4 * (0.25 / n) ** 0.5 * 2


def test_plans_draw_ops_uniformly_and_signs_half_the_time():
    n = 28_000
    plan = A.randaugment_plan(n, 32, 32, generator=torch.Generator().manual_seed(3))
    assert len(plan) == 2
    ops, mags = plan[0]
    counts = torch.bincount(ops, minlength=len(A.OPS))[:14].double()  # Invert is not in it
    chi2 = ((counts - n / 14) ** 2 / (n / 14)).sum().item()
    assert chi2 < 34.5  # 13 degrees of freedom, p = 0.001
    rotate = mags[ops == A.OPS.index("Rotate")]
    assert set(rotate.abs().tolist()) == {9 * 30.0 / 30}  # bin 9 of linspace(0, 30, 31)
    assert abs((rotate < 0).double().mean() - 0.5) < 0.05


def test_autoaugment_cifar10_applies_each_op_with_its_probability():
    n = 50_000
    (op1, _), (op2, _) = A.autoaugment_cifar10_plan(n, 32, 32, torch.Generator().manual_seed(4))
    # Sharpness is the second op of 3 sub-policies (p 0.9, 0.6, 0.2): its share of slot 2.
    expected = sum(p for _, (o, p, _) in A.CIFAR10_POLICY if o == "Sharpness") / 25
    assert expected == pytest.approx(1.7 / 25)
    share = (op2 == A.OPS.index("Sharpness")).double().mean().item()
    assert abs(share - expected) < 4 * (expected * (1 - expected) / n) ** 0.5
    assert (op1 == A.OPS.index("Invert")).any() and (op1 == 0).any()


def test_random_erasing_matches_torchvisions_distribution():
    n, h, w = 4000, 32, 32
    boxes = A.random_erasing_params(n, h, w, p=0.5, generator=torch.Generator().manual_seed(5))
    ours = A.batch_erase(torch.ones(n, 3, h, w), boxes)
    erase = v2.RandomErasing(p=0.5)
    torch.manual_seed(5)
    theirs = torch.stack([erase(torch.ones(3, h, w)) for _ in range(n)])

    def stats(x):
        erased = x[:, 0] == 0  # (N, H, W)
        rows, cols = erased.any(2).double(), erased.any(1).double()
        r = torch.arange(h, dtype=torch.float64)
        top = torch.where(rows.any(1), (rows * r).sum(1) / rows.sum(1).clamp(min=1), -1.0)
        return erased.double().mean((1, 2)), rows.sum(1), cols.sum(1), top

    for mine, ref in zip(stats(ours), stats(theirs)):
        assert ks_2samp(mine.numpy(), ref.numpy()).pvalue > 0.001
    assert abs((boxes[:, 2] > 0).double().mean() - 0.5) < 0.03
    assert (boxes[:, 0] + boxes[:, 2] <= h).all() and (boxes[:, 1] + boxes[:, 3] <= w).all()


def test_batch_augment_runs_the_policy_then_normalizes_then_erases():
    images = _images(8, h=16, w=16)
    aug = BatchAugment((0.5,) * 3, (0.25,) * 3, auto_augment="trivialaugment", random_erasing=1.0)
    out = aug(images, train=True, generator=torch.Generator().manual_seed(6))
    g = torch.Generator().manual_seed(6)
    expected = normalize(A.auto_augment(images, "trivialaugment", g), (0.5,) * 3, (0.25,) * 3)
    boxes = A.random_erasing_params(8, 16, 16, 1.0, generator=g)
    torch.testing.assert_close(out, A.batch_erase(expected, boxes), rtol=0, atol=0)
    assert (boxes[:, 2] > 0).all()
    # evaluation is untouched
    assert torch.equal(aug(images, train=False), normalize(images, (0.5,) * 3, (0.25,) * 3))


def test_batch_augment_with_rrc_and_a_policy_leaves_the_fused_path():
    images = _images(4, h=40, w=40)
    aug = BatchAugment(
        (0.5,) * 3, (0.25,) * 3, image_size=24, random_resized_crop=True, auto_augment="randaugment"
    )
    out = aug(images, train=True, generator=torch.Generator().manual_seed(7))
    assert out.shape == (4, 3, 24, 24) and out.dtype == torch.float32


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="Unknown augment.auto_augment='randaug'; use one of"):
        BatchAugment((0.5,), (0.5,), auto_augment="randaug")
    with pytest.raises(ValueError, match=r"augment.random_erasing=1.5 must be a probability"):
        BatchAugment((0.5,), (0.5,), random_erasing=1.5)
    with pytest.raises(ValueError, match="RandAugment magnitude must be in"):
        A.randaugment_plan(2, 8, 8, magnitude=31)


def test_datamodule_option_reaches_both_pipelines(tmp_path):
    from lightning_cls.data.digits import DigitsDataModule

    dm = DigitsDataModule(
        augment=AugmentPreset(auto_augment="autoaugment_cifar10", random_erasing=0.25)
    )
    assert dm.batch_augment().auto_augment == "autoaugment_cifar10"
    assert dm.batch_augment().random_erasing == 0.25
    names = [type(t).__name__ for t in DigitsDataModule(
        pipeline="pil", augment=AugmentPreset(auto_augment="randaugment", random_erasing=0.5)
    ).train_transform().transforms]  # fmt: skip
    assert names[0] == "RandAugment" and names[-1] == "RandomErasing"
