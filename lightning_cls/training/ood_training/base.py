"""``OODTraining``, the base of the training-time OOD methods, and their registry.

A new method is one ``OODTraining`` subclass (its builder takes the network, to size its heads,
and its options as keywords), one line in ``OOD_TRAINING``'s lazy table below (or the
``lightning_cls.ood_training`` entry-point group for a plug-in) and one
``conf/ood_training/<name>.yaml`` (``name`` and the options' defaults).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from lightning_cls.registry import Registry


class OODTraining(nn.Module):
    """An auxiliary training loss with its own parameters (saved with the module).

    ``loss(net, x, y)`` is the extra loss of this training batch, already weighted;
    ``epoch_metrics(reduce)`` what the module logs as ``train/<key>`` at each epoch's end
    (counted on the batch's device, no ``self.log`` per step); ``reset`` starts them over."""

    name: str = ""

    def loss(self, net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def epoch_metrics(self, reduce: Callable[..., torch.Tensor]) -> dict[str, torch.Tensor]:
        """``reduce``: the strategy's (``trainer.strategy.reduce``), summing over ranks."""
        return {}

    def reset(self) -> None:
        """Forget the epoch's counts."""


OOD_TRAINING = Registry("ood training", "lightning_cls.ood_training", returns=OODTraining)
for _name, _target in {
    "rotation": "lightning_cls.training.ood_training.rotation:Rotation",
}.items():
    OOD_TRAINING.register(_name, _target)


def ood_training_config(value: Mapping[str, Any] | str | None) -> dict[str, Any] | None:
    """``{name, **options}`` as a plain dict (a bare name: its defaults), or None for none
    (None, ``"none"`` or a mapping whose name is null or ``"none"``)."""
    if isinstance(value, str):
        value = {"name": value}
    if value is None or value.get("name") in (None, "none"):
        return None
    if not isinstance(value, Mapping):
        raise TypeError(
            f"ood_training must be a mapping {{name: <method>, <option>: <value>}} or None, got "
            f"{type(value).__name__} ({value!r})."
        )
    return dict(value)


def build_ood_training(value: Mapping[str, Any] | str | None, net: nn.Module) -> OODTraining | None:
    """The method ``value`` names (``{name, **options}``; None: none), built for ``net``."""
    config = ood_training_config(value)
    if config is None:
        return None
    options = dict(config)
    name = options.pop("name")
    if name not in OOD_TRAINING:
        raise OOD_TRAINING.unknown(name, note=", or none (ood_training=none)")
    takes = inspect.signature(OOD_TRAINING.get(name)).parameters
    unknown = sorted(set(options) - set(takes) | ({"net"} & set(options)))
    if unknown:
        known = ", ".join(k for k in takes if k != "net") or "(none)"
        raise ValueError(
            f"ood_training={name} has no option {', '.join(unknown)}; its options: {known} "
            f"(conf/ood_training/{name}.yaml)."
        )
    return OOD_TRAINING.create(name, net=net, **options)
