"""``UnusedParameterFinder``: after the first backward, warn about parameters without a gradient.

A parameter whose ``.grad`` is still None after ``loss.backward()`` was either frozen
(``requires_grad=False``) or never took part in the forward pass (a layer built in
``__init__`` but not called, a branch never taken). Both silently waste capacity; the second
also makes DDP hang unless ``find_unused_parameters=True``. One check, one warning.

Parameters a network freezes by its own design (``frozen_by_design``: airbench's whitening
filters and BatchNorm scales) are not listed: nothing was lost, so there is nothing to warn of.
"""

from __future__ import annotations

import logging
import warnings

import pytorch_lightning as pl

from lightning_cls.models.frozen import is_frozen_by_design

log = logging.getLogger(__name__)

_MAX_LISTED = 20


def _listing(names: list[str]) -> str:
    more = f" (+{len(names) - _MAX_LISTED} more)" if len(names) > _MAX_LISTED else ""
    return ", ".join(names[:_MAX_LISTED]) + more


class UnusedParameterFinder(pl.Callback):
    """Warn once, after the first backward, listing parameters whose ``.grad`` is None.

    ``include_frozen=False`` leaves out parameters with ``requires_grad=False`` (for
    fine-tuning with a deliberately frozen backbone).
    """

    def __init__(self, include_frozen: bool = True):
        self.include_frozen = include_frozen
        self._checked = False

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._checked:
            return
        self._checked = True
        unused, frozen = [], []
        for name, param in pl_module.named_parameters():
            if param.grad is None and not is_frozen_by_design(param):
                (unused if param.requires_grad else frozen).append(name)
        problems = []
        if unused:
            problems.append(
                f"{len(unused)} parameter(s) got no gradient although they require one — they "
                f"are not used in forward(): {_listing(unused)}. Remove the layers, or call them."
            )
        if frozen and self.include_frozen:
            problems.append(
                f"{len(frozen)} parameter(s) are frozen (requires_grad=False): {_listing(frozen)}. "
                "If that is intended, set include_frozen=false on this callback."
            )
        if problems and trainer.is_global_zero:
            warnings.warn("UnusedParameterFinder: " + " ".join(problems), UserWarning, stacklevel=2)
        elif not problems:
            log.info("UnusedParameterFinder: every parameter received a gradient.")
