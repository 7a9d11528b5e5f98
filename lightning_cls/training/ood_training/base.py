"""``OODTraining``, the base of the training-time OOD methods, and their registry.

A new method is one ``OODTraining`` subclass (its builder takes the network, to size its heads,
and its options as keywords), one line in ``OOD_TRAINING``'s lazy table below (or the
``lightning_cls.ood_training`` entry-point group for a plug-in) and one
``conf/ood_training/<name>.yaml`` (``name`` and the options' defaults).
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from lightning_cls.registry import Registry
from lightning_cls.training.optim import is_channels_last


class OODTraining(nn.Module):
    """An auxiliary training loss with its own parameters (saved with the module).

    ``loss(net, x, y)`` is the extra loss of this training batch, already weighted;
    ``epoch_metrics(reduce)`` what the module logs as ``train/<key>`` at each epoch's end: the
    means over the epoch's images of what ``loss`` passed to ``add`` (summed on the batch's
    device, no ``self.log`` per step); ``reset`` starts them over."""

    name: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.reset()

    def loss(self, net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def add(self, count: int, **sums: torch.Tensor) -> None:
        """Add a batch's ``sums`` (0-dim tensors, each summed over its ``count`` images) to the
        epoch's, on their device."""
        device = next(iter(sums.values())).device
        if self._count is None or self._count.device != device:
            self._count = torch.zeros((), dtype=torch.float32, device=device)
            self._sums = {key: self._count.clone() for key in sums}
        self._count = self._count + count
        for key, value in sums.items():
            self._sums[key] = self._sums[key] + value.detach().float()

    def epoch_metrics(self, reduce: Callable[..., torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each ``add``ed key's mean over every rank's images of the epoch; ``reduce``: the
        strategy's (``trainer.strategy.reduce``), summing over ranks."""
        if self._count is None:
            return {}
        count = reduce(self._count.clone(), reduce_op="sum")
        return {
            key: (reduce(value.clone(), reduce_op="sum") / count).float()
            for key, value in self._sums.items()
        }

    def reset(self) -> None:
        """Forget the epoch's sums."""
        self._count: torch.Tensor | None = None
        self._sums: dict[str, torch.Tensor] = {}


def loss_weight(weight: Any, what: str) -> float:
    """``ood_training.weight`` as a float, or one error naming the bad value (``what``: the
    method's name in the message, e.g. ``"rotation prediction"``)."""
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise TypeError(f"ood_training.weight must be a number, got {weight!r}.")
    if not (math.isfinite(weight) and weight > 0):
        raise ValueError(
            f"ood_training.weight must be a finite number > 0, got weight={weight}; "
            f"ood_training=none turns {what} off."
        )
    return float(weight)


def same_memory_format(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``out`` (B, C, H, W) in channels_last when ``x`` is (the recipe's layout), else as is."""
    return out.contiguous(memory_format=torch.channels_last) if is_channels_last(x) else out


@contextlib.contextmanager
def running_stats_kept(net: nn.Module) -> Iterator[None]:
    """Within: ``net``'s BatchNorm layers normalise by the batch's own statistics (train mode)
    but fold none of them into their running statistics (momentum 0), so an extra pass of
    rotated or outlier images leaves evaluation normalising as the training images made it."""
    norms = [m for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    try:
        for m in norms:
            m.momentum = 0.0
        yield
    finally:
        for m, momentum in zip(norms, momenta):
            m.momentum = momentum


OOD_TRAINING = Registry("ood training", "lightning_cls.ood_training", returns=OODTraining)
for _name, _target in {
    "rotation": "lightning_cls.training.ood_training.rotation:Rotation",
    "outliers": "lightning_cls.training.ood_training.outliers:TileOutliers",
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
