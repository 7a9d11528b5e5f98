"""lightning_cls.training.optim: the triangle schedule and parameter groups with lr/decay scales."""

import functools

import pytest
import torch
from torch import nn

from helpers import make_module
from lightning_cls.training.optim import apply_group_scales, norm_bias_groups, triangle


def _lrs(scheduler, steps):
    out = []
    for _ in range(steps):
        out.append(scheduler.get_last_lr()[0])
        scheduler.optimizer.step()
        scheduler.step()
    return out


def test_triangle_rises_to_peak_then_falls_to_end():
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    lrs = _lrs(triangle(opt, total_steps=100, start=0.2, peak_at=0.25, end=0.1), 101)
    assert lrs[0] == pytest.approx(0.2) and lrs[25] == pytest.approx(1.0)
    assert max(lrs) == pytest.approx(1.0) and lrs[100] == pytest.approx(0.1)
    assert all(a <= b for a, b in zip(lrs[:25], lrs[1:26]))
    assert all(a >= b for a, b in zip(lrs[25:100], lrs[26:101]))
    with pytest.raises(ValueError, match=r"a fraction in \(0, 1\), got peak_at=1.5"):
        triangle(opt, 10, peak_at=1.5)


def test_norm_bias_groups_scale_lr_but_keep_decay_per_step():
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4, 2))
    groups = norm_bias_groups(net, lr_scale=64.0)
    norm = set(map(id, net[1].parameters()))
    assert {id(p) for p in groups[1]["params"]} == norm
    assert not norm & {id(p) for p in groups[0]["params"]}
    assert sum(len(g["params"]) for g in groups) == len(list(net.parameters()))
    opt = apply_group_scales(torch.optim.SGD(groups, lr=0.1, weight_decay=1e-3))
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)
    assert opt.param_groups[1]["lr"] == pytest.approx(6.4)
    assert opt.param_groups[1]["lr"] * opt.param_groups[1]["weight_decay"] == pytest.approx(1e-4)
    apply_group_scales(opt)  # idempotent: the scales were consumed
    assert opt.param_groups[1]["lr"] == pytest.approx(6.4)
    with pytest.raises(ValueError, match="lr_scale must be > 0, got lr_scale=0"):
        norm_bias_groups(net, lr_scale=0)


def test_module_builds_its_optimizer_from_param_groups():
    module = make_module(
        model_name="airbench",
        optimizer=functools.partial(torch.optim.SGD, lr=0.5, momentum=0.9),
        module_kwargs={"param_groups": functools.partial(norm_bias_groups, lr_scale=10.0)},
        widths=(4, 8, 8),
        stem_width=4,
    )
    optimizer = module.configure_optimizers()
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([0.5, 5.0])
    bn_bias = module.net.blocks[0].bn1.bias
    assert any(p is bn_bias for p in optimizer.param_groups[1]["params"])
    assert "param_groups" not in module.hparams  # a callable: not saved in the checkpoint
