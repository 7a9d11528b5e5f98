"""optimizer=muon: torch.optim.Muon for the hidden layers' matrices (conv filters flattened),
SGD/AdamW for the rest, as one optimizer that steps, schedules and checkpoints."""

import copy
import functools
import io

import pytest
import torch
from torch import nn

from helpers import make_module
from lightning_cls.training.optim import (
    MuonHybrid,
    apply_group_scales,
    cosine,
    muon_groups,
    norm_bias_groups,
)


def _net():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, bias=False), nn.BatchNorm2d(6), nn.ReLU(),
        nn.Conv2d(6, 8, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3),
    )  # fmt: skip


def _step(net, opt, seed):
    torch.manual_seed(seed)
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 3, (4,))
    opt.zero_grad()
    nn.functional.cross_entropy(net(x), y).backward()
    opt.step()


def test_muon_groups_follow_airbench94_muon():
    net = _net()
    groups = muon_groups(net, head_lr_scale=10.0)
    ids = [{id(p) for p in g["params"]} for g in groups]
    assert ids[0] == {id(net[0].weight), id(net[3].weight), id(net[6].weight)}  # hidden
    assert ids[2] == {id(p) for p in net[8].parameters()}  # the head: last Linear, off Muon
    assert [g["muon"] for g in groups] == [True, False, False]
    opt = apply_group_scales(MuonHybrid(groups, lr=0.2, aux_lr=0.05, aux_weight_decay=1e-2))
    lrs = [g["lr"] for g in opt.param_groups]
    assert lrs == pytest.approx([0.2, 0.05, 0.5])
    assert opt.param_groups[2]["lr"] * opt.param_groups[2]["weight_decay"] == pytest.approx(5e-4)
    with pytest.raises(ValueError, match="head_lr_scale must be > 0, got head_lr_scale=0"):
        muon_groups(net, head_lr_scale=0)


def test_without_flags_the_last_matrix_stays_off_muon_beside_any_groups():
    net = _net()
    for params in (net.parameters(), norm_bias_groups(net)):
        opt = MuonHybrid(params)
        on_muon = {id(p) for g in opt.param_groups if g["muon"] for p in g["params"]}
        assert on_muon == {id(net[0].weight), id(net[3].weight), id(net[6].weight)}
        assert sum(len(g["params"]) for g in opt.param_groups) == len(list(net.parameters()))


@pytest.mark.parametrize("channels_last", [False, True])
def test_conv_filters_take_torch_muons_step_on_their_flattened_matrix(channels_last):
    net = _net()
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    ref = copy.deepcopy(net)
    opt = MuonHybrid(net.parameters(), lr=0.1, normalize_weights=False, aux_lr=0.0, head_off=False)
    for seed in range(3):
        _step(net, opt, seed)
    # Reference: torch.optim.Muon on plain 2-D copies of the weights, fed the flattened grads.
    weights = [p for p in ref.parameters() if p.ndim >= 2]
    copies = [nn.Parameter(p.detach().reshape(len(p), -1).clone()) for p in weights]
    muon = torch.optim.Muon(copies, lr=0.1, momentum=0.6, weight_decay=0.0)
    for seed in range(3):
        torch.manual_seed(seed)
        x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 3, (4,))
        ref.zero_grad()
        nn.functional.cross_entropy(ref(x), y).backward()
        for p, c in zip(weights, copies):
            c.grad = p.grad.reshape(len(p), -1).clone()
        muon.step()
        with torch.no_grad():
            for p, c in zip(weights, copies):
                p.copy_(c.view_as(p))
    assert not torch.equal(net[3].weight, _net()[3].weight)  # it moved
    torch.testing.assert_close(net[3].weight, ref[3].weight, rtol=1e-4, atol=1e-5)


def test_airbench_weight_normalization_keeps_the_filter_norm():
    net = _net()
    opt = MuonHybrid(net.parameters(), lr=0.1)
    _step(net, opt, 0)
    norm = net[3].weight.norm()  # rescaled to sqrt(8) then moved by one orthogonal step
    _step(net, opt, 1)
    assert norm.item() == pytest.approx(net[3].weight.norm().item(), rel=0.2)


@pytest.mark.parametrize("aux", ["sgd", "adamw"])
def test_state_round_trip_resumes_exactly(aux):
    net = _net()
    make = functools.partial(MuonHybrid, lr=0.1, aux=aux, aux_lr=0.01)
    opt = make(muon_groups(net))
    sched = cosine(opt, total_steps=10)
    for seed in range(3):
        _step(net, opt, seed)
        sched.step()
    buffer = io.BytesIO()
    torch.save({"opt": opt.state_dict(), "sched": sched.state_dict(), "net": net.state_dict()},
               buffer)  # fmt: skip
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    twin = _net()
    twin.load_state_dict(saved["net"])
    twin_opt = make(muon_groups(twin))
    twin_sched = cosine(twin_opt, total_steps=10)
    twin_opt.load_state_dict(saved["opt"])
    twin_sched.load_state_dict(saved["sched"])
    for seed in (3, 4):
        for n, o, s in ((net, opt, sched), (twin, twin_opt, twin_sched)):
            _step(n, o, seed)
            s.step()
    assert [g["lr"] for g in twin_opt.param_groups] == [g["lr"] for g in opt.param_groups]
    for a, b in zip(net.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    # Negative control: a fresh optimizer (no momentum buffers) ends elsewhere.
    cold = _net()
    cold.load_state_dict(saved["net"])
    cold_opt = make(muon_groups(cold))
    for seed in (3, 4):
        _step(cold, cold_opt, seed)
    assert not torch.equal(cold[3].weight, net[3].weight)
    with pytest.raises(ValueError, match="not written by MuonHybrid"):
        twin_opt.load_state_dict(torch.optim.SGD(twin.parameters(), lr=1).state_dict())


def test_bad_options_are_one_line():
    net = _net()
    with pytest.raises(
        ValueError, match=r"optimizer.aux='lion' is not known; use one of sgd, adamw"
    ):
        MuonHybrid(net.parameters(), aux="lion")
    with pytest.raises(ValueError, match=r"marked muon=True holds parameters of shapes \[\(6,\)\]"):
        MuonHybrid([{"params": [net[1].weight], "muon": True}])


def test_module_steps_and_schedules_muon():
    module = make_module(
        model_name="airbench",
        optimizer=functools.partial(MuonHybrid, lr=0.2, aux_lr=0.1),
        module_kwargs={"param_groups": muon_groups},
        widths=(4, 8, 8),
        stem_width=4,
    )
    optimizer = module.configure_optimizers()
    assert isinstance(optimizer, MuonHybrid)
    hidden = {id(p) for p in optimizer.param_groups[0]["params"]}
    assert id(module.net.blocks[0].conv1.weight) in hidden
    assert id(module.net.head.weight) not in hidden


def test_lightning_resume_mid_run_matches_an_uninterrupted_run(tmp_path):
    """Lightning saves and restores MuonHybrid's state (the momentum buffers of both sides)."""
    from helpers.tiny import make_data, make_trainer

    def module():
        torch.manual_seed(0)
        return make_module(
            make_data(), optimizer=functools.partial(MuonHybrid, lr=0.05, aux_lr=0.05),
            module_kwargs=dict(param_groups=muon_groups),
        )  # fmt: skip

    whole = module()
    make_trainer(tmp_path / "a", max_epochs=2).fit(whole, datamodule=make_data())
    first = module()
    trainer = make_trainer(tmp_path / "b", max_epochs=1)
    trainer.fit(first, datamodule=make_data())
    trainer.save_checkpoint(tmp_path / "one.ckpt")
    resumed = module()
    make_trainer(tmp_path / "c", max_epochs=2).fit(
        resumed, datamodule=make_data(), ckpt_path=tmp_path / "one.ckpt"
    )
    for a, b in zip(whole.parameters(), resumed.parameters()):
        torch.testing.assert_close(a, b)
    assert not torch.equal(whole.net.classifier[-1].weight, first.net.classifier[-1].weight)
