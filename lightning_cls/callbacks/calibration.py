"""``Calibrate``: temperature scaling, the rejection rule and prediction sets, when ``fit`` ends.

Added by ``train.py`` for ``calibrate=true``, ``reject=...`` or ``conformal=<alpha>``, before
the ``ExportCallback``: it calibrates the best checkpoint's network (the final weights without
one) on the validation split (``lightning_cls.training.calibration``) and hands what it chose
to the module's task (``TrainingTask.decide``), so the test run and every exported artifact
carry it; it writes it into that checkpoint's task too (replaced atomically, with a log line),
so predict and the server carry it from the checkpoint.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytorch_lightning as pl

from lightning_cls.inference import conformal as conformal_sets
from lightning_cls.inference import load_torch_model
from lightning_cls.inference.spec import InputSpec
from lightning_cls.inference.trust import build_rule, check_temperature_fit
from lightning_cls.training.calibration import Calibration, calibrate, update_checkpoint

log = logging.getLogger(__name__)


class Calibrate(pl.Callback):
    """``temperature``: fit one (multi-label: one per label); ``reject``: a rule's name or
    ``{name: <rule>, **its options}`` (``conf/reject/<name>.yaml``) or None, with ``keep`` the validation share answered; ``diagram``: the reliability PNG;
    ``conformal``: the miscoverage alpha of prediction sets (``conformal_method``) or None;
    ``temperature_fit``: ``nll`` | ``ece`` | ``auto`` (training/calibration.py)."""

    def __init__(
        self,
        temperature: bool = True,
        reject: str | Mapping[str, Any] | None = None,
        keep: float = 0.95,
        diagram: str | Path | None = None,
        conformal: float | None = None,
        conformal_method: str = conformal_sets.DEFAULT_METHOD,
        temperature_fit: str = "auto",
    ):
        self.temperature, self.reject, self.keep, self.diagram = temperature, reject, keep, diagram
        conformal_sets.check_options(conformal, conformal_method)
        self.conformal, self.conformal_method = conformal, conformal_method
        self.temperature_fit = check_temperature_fit(temperature_fit)
        self.rule = build_rule(reject)  # built with its options, checked now
        self.result: Calibration | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Before training (the DataModule is set up): a data source without validation
        images in memory is an error now, not after the whole fit."""
        if stage == "fit":
            splits = self._val(trainer)
            if self.conformal is not None:  # sets are for single-label models
                pl_module.decision.calibration.refuse_sets()
            if self.rule is not None and self.rule.needs_features:  # fits this data's train
                self.rule.check_options(images=len(splits.get("train") or ()))

    @staticmethod
    def _val(trainer: pl.Trainer):
        splits = getattr(trainer.datamodule, "splits", None) or {}
        if "val" not in splits:
            raise ValueError(
                "calibrate=true / reject=... need the validation images in memory (a data "
                f"source with splits['val']); {type(trainer.datamodule).__name__} has none. "
                "Calibrate its checkpoint with python -m lightning_cls.calibrate instead."
            )
        return splits

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        splits = self._val(trainer)
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        if best:
            net, spec = load_torch_model(best)
        else:
            net = copy.deepcopy(getattr(pl_module.net, "_orig_mod", pl_module.net)).cpu()
            spec = InputSpec.from_hparams(pl_module.hparams)
        self.result = calibrate(
            net,
            spec,
            splits["val"],
            splits.get("test"),
            temperature=self.temperature,
            reject=self.reject,
            keep=self.keep,
            choose_threshold=getattr(pl_module.task, "choose_threshold", True),
            diagram=self.diagram,
            train=splits.get("train"),
            conformal=self.conformal,
            conformal_method=self.conformal_method,
            temperature_fit=self.temperature_fit,
        )
        updates = self.result.spec_updates
        threshold = updates.get("threshold", pl_module.decision.threshold)
        trust = {k: updates.get(k) for k in ("temperature", "reject", "conformal")}
        pl_module.task.decide(threshold, **trust)  # the task has it: test, export carry it
        if best and trainer.is_global_zero:  # and the best checkpoint, for what loads it later
            update_checkpoint(best, best, updates)
