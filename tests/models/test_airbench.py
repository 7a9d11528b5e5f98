"""airbench: shapes, options, whitening init and its errors."""

import pytest
import torch

from lightning_cls.models.airbench import AirbenchNet


def test_forward_backward_and_channels_last():
    net = AirbenchNet(num_classes=7, widths=(8, 16, 32), stem_width=8).to(
        memory_format=torch.channels_last
    )
    x = torch.randn(4, 3, 32, 32).contiguous(memory_format=torch.channels_last)  # (B, C, H, W)
    out = net(x)
    assert out.shape == (4, 7)
    out.sum().backward()
    assert all(p.grad is not None for p in net.parameters() if p.requires_grad)


def test_grayscale_and_other_sizes():
    assert AirbenchNet(in_channels=1, image_size=28, widths=(8, 8, 8), stem_width=8)(
        torch.randn(2, 1, 28, 28)
    ).shape == (2, 10)


def test_whitening_decorrelates_patches_and_is_frozen():
    torch.manual_seed(0)
    net = AirbenchNet(whiten=True, widths=(8, 8, 8))
    base = torch.rand(32, 1, 16, 16)
    images = torch.cat(
        [base, base * 0.5 + 0.1 * torch.rand_like(base), torch.rand_like(base)], 1
    )  # correlated channels
    net.init_whitening(images, eps=1e-7)  # eps only damps near-zero-variance directions
    out = torch.nn.functional.conv2d(images, net.stem.weight[:12])  # (B, 12, 15, 15)
    feats = out.transpose(0, 1).reshape(12, -1)
    feats = feats - feats.mean(1, keepdim=True)
    cov = feats @ feats.T / feats.shape[1]
    torch.testing.assert_close(cov, torch.eye(12), atol=0.05, rtol=0)
    assert not net.stem.weight.requires_grad and net(images).shape == (32, 10)


def test_errors_name_the_value_and_fix():
    with pytest.raises(ValueError, match=r"three block widths, got widths=\[8, 8\]"):
        AirbenchNet(widths=(8, 8))
    with pytest.raises(
        ValueError, match=r"image_size >= 8.*got image_size=4; set data\.image_size>=8"
    ):
        AirbenchNet(image_size=4)
    with pytest.raises(
        ValueError,
        match=r"image_size >= 9 \(a 2x2 whitening stem, then three 2x2 max-pools\), got "
        r"image_size=8; set data\.image_size>=9",
    ):
        AirbenchNet(image_size=8, whiten=True)
    smallest = AirbenchNet(image_size=9, whiten=True, widths=(4, 4, 4)).eval()
    assert smallest(torch.zeros(1, 3, 9, 9)).shape == (1, 10)
    with pytest.raises(ValueError, match="build with whiten=True"):
        AirbenchNet().init_whitening(torch.rand(2, 3, 8, 8))


def test_dirac_init_passes_input_through_and_bn_weight_can_be_frozen():
    net = AirbenchNet(widths=(8, 16, 16), stem_width=8, dirac=True, bn_weight=False)
    conv = net.blocks[1].conv1  # 8 -> 16 channels
    x = torch.randn(2, 8, 6, 6)
    torch.testing.assert_close(torch.nn.functional.conv2d(x, conv.weight[:8], padding=1), x)
    assert conv.weight[8:].abs().sum() > 0  # the extra filters keep their random init
    bns = [m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bns and all(not bn.weight.requires_grad and bn.bias.requires_grad for bn in bns)
    plain = AirbenchNet(widths=(8, 16, 16), stem_width=8)
    x = torch.randn(2, 8, 6, 6)
    assert not torch.allclose(
        torch.nn.functional.conv2d(x, plain.blocks[1].conv1.weight[:8], padding=1), x
    )
