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


def test_parameters_frozen_by_the_networks_design_are_not_listed(tiny_data, tiny_trainer):
    """airbench freezes its whitening filters and BatchNorm scales on purpose: no warning for
    those (every cifar10_fast run printed one), but one still for a parameter the user froze."""
    from helpers.tiny import make_module
    from lightning_cls.models.airbench import AirbenchNet
    from lightning_cls.models.frozen import is_frozen_by_design

    data = tiny_data(num_channels=3, image_size=16)
    net = AirbenchNet(num_classes=data.num_classes, image_size=16, whiten=True, bn_weight=False)
    designed = [n for n, p in net.named_parameters() if is_frozen_by_design(p)]
    assert designed == ["stem.weight"] + [
        f"blocks.{i}.bn{j}.weight" for i in range(3) for j in (1, 2)
    ]
    assert all(not p.requires_grad for n, p in net.named_parameters() if n in designed)
    module = make_module(data, module_kwargs={"net": net})
    trainer = tiny_trainer([UnusedParameterFinder()], limit_val_batches=0, limit_train_batches=1)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        trainer.fit(module, datamodule=data)
    assert not [w for w in record if "UnusedParameterFinder" in str(w.message)]

    net.blocks[0].conv1.weight.requires_grad_(False)  # frozen by the user: still named
    module = make_module(data, module_kwargs={"net": net})
    trainer = tiny_trainer([UnusedParameterFinder()], limit_val_batches=0, limit_train_batches=1)
    with pytest.warns(
        UserWarning, match=r"1 parameter\(s\) are frozen .*: net\.blocks\.0\.conv1\.weight\."
    ):
        trainer.fit(module, datamodule=data)
