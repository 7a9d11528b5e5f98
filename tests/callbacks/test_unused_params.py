from __future__ import annotations

import warnings

import pytest
from torch import nn

from lightning_cls.callbacks import UnusedParameterFinder


def test_warns_once_naming_unused_and_frozen_parameters(tiny_data, tiny_module, tiny_trainer):
    data = tiny_data()
    module = tiny_module(data)
    module.net.extra = nn.Linear(3, 3)  # built, never called
    module.net.features[0].bias.requires_grad_(False)
    trainer = tiny_trainer([UnusedParameterFinder()], limit_val_batches=0, limit_train_batches=2)
    with pytest.warns(
        UserWarning,
        match=r"2 parameter\(s\) got no gradient .*net\.extra\.weight, net\.extra\.bias",
    ) as record:
        trainer.fit(module, datamodule=data)
    ours = [w for w in record if "UnusedParameterFinder" in str(w.message)]
    assert len(ours) == 1
    assert "frozen (requires_grad=False): net.features.0.bias" in str(ours[0].message)


def test_silent_when_every_parameter_is_used(tiny_data, tiny_module, tiny_trainer):
    data = tiny_data()
    trainer = tiny_trainer([UnusedParameterFinder()], limit_val_batches=0, limit_train_batches=1)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        trainer.fit(tiny_module(data), datamodule=data)
    assert not [w for w in record if "UnusedParameterFinder" in str(w.message)]
