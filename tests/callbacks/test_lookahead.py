"""Lookahead: the rising-decay schedule, the pull towards the average, and the final copy."""

import pytest
import torch
from torch import nn

from lightning_cls.callbacks import Lookahead


def test_decay_rises_from_zero_to_decay_max():
    la = Lookahead(decay_max=0.8, power=3.0)
    assert la.decay(0, 100) == 0.0
    assert la.decay(50, 100) == pytest.approx(0.8 * 0.125)
    assert la.decay(100, 100) == pytest.approx(0.8) and la.decay(150, 100) == pytest.approx(0.8)


def test_update_pulls_weights_to_the_running_average():
    la = Lookahead()
    net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    la._ema = {k: torch.zeros_like(v) for k, v in net.state_dict().items() if v.is_floating_point()}
    with torch.no_grad():
        net[0].weight.fill_(1.0)
    la._update(net, decay=0.75)  # ema = 0.75 * 0 + 0.25 * 1
    torch.testing.assert_close(net[0].weight, torch.full((2, 2), 0.25))
    torch.testing.assert_close(la._ema["0.weight"], torch.full((2, 2), 0.25))
    assert net[1].num_batches_tracked.dtype == torch.int64  # integer buffers are left alone
    with torch.no_grad():
        net[0].weight.fill_(5.0)
    la._update(net, decay=1.0)  # the last step: the network takes the average outright
    torch.testing.assert_close(net[0].weight, torch.full((2, 2), 0.25))


def test_training_ends_on_the_average_and_still_learns(tiny_data, tiny_module, tiny_trainer):
    torch.manual_seed(0)
    data = tiny_data()
    module = tiny_module(data)
    la = Lookahead(every=2)
    trainer = tiny_trainer([la], max_epochs=12)
    trainer.fit(module, datamodule=data)
    for name, value in module.state_dict().items():
        if value.is_floating_point():
            torch.testing.assert_close(value, la._ema[name])
    assert trainer.callback_metrics["val/acc"] > 0.5  # 4 classes: chance is 0.25
    assert "ema" in la.state_dict()


def test_errors_name_the_value():
    with pytest.raises(ValueError, match="every must be >= 1 step, got every=0"):
        Lookahead(every=0)
    with pytest.raises(ValueError, match=r"decay_max must be in \[0, 1\), got decay_max=1.0"):
        Lookahead(decay_max=1.0)
