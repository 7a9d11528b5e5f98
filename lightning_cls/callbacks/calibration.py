"""``Calibrate``: temperature scaling, the rejection rule and prediction sets, when ``fit`` ends.

Added by ``train.py`` when its ``Calibrator`` (the ``calibration`` and ``reject`` groups) has
anything to fit. It calibrates the best checkpoint's network (the final weights without one) on
the validation split with ``Calibrator.fit``, the call the calibrate command makes too, and
hands what it chose to the module's task (``TrainingTask.decide``), so the test run and every
exported artifact carry it; it writes it into that checkpoint's task too (replaced atomically,
with a log line), so predict and the server carry it from the checkpoint.

It runs once per fit, at the first of: its own ``on_fit_end``, or ``run`` called by an
``ExportCallback`` before it exports (``export/callback.py`` finds it by type), so the export
carries the calibration wherever the two stand in the callback list.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import replace

import pytorch_lightning as pl

from lightning_cls.inference import load_torch_model
from lightning_cls.inference.spec import InputSpec
from lightning_cls.training.calibration import Calibration, Calibrator, update_checkpoint

log = logging.getLogger(__name__)


class Calibrate(pl.Callback):
    """Fits ``calibrator`` (``training/calibration.py``; default: a temperature) on the
    validation split when ``fit`` ends; ``result`` is what it chose."""

    def __init__(self, calibrator: Calibrator | None = None):
        self.calibrator = calibrator if calibrator is not None else Calibrator()
        self.result: Calibration | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Before training (the DataModule is set up): a data source without validation
        images in memory is an error now, not after the whole fit."""
        if stage == "fit":
            self.result = None  # a new fit calibrates again
            splits = self._val(trainer)
            if self.calibrator.conformal is not None:  # sets are for single-label models
                pl_module.decision.calibration.refuse_sets()
            if self.calibrator.needs_features:  # fits this data's train split
                self.calibrator.rule.check_options(images=len(splits.get("train") or ()))

    @staticmethod
    def _val(trainer: pl.Trainer):
        splits = getattr(trainer.datamodule, "splits", None) or {}
        if "val" not in splits:
            raise ValueError(
                "calibration=default / reject=... need the validation images in memory (a data "
                f"source with splits['val']); {type(trainer.datamodule).__name__} has none. "
                "Calibrate its checkpoint with python -m lightning_cls.calibrate instead."
            )
        return splits

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.run(trainer, pl_module)

    def run(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> Calibration:
        """Calibrate (once per fit: a second call returns the first's result) and hand the
        decision to ``pl_module``'s task."""
        if self.result is not None:
            return self.result
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        if best:
            net, spec = load_torch_model(best)
        else:
            net = copy.deepcopy(getattr(pl_module.net, "_orig_mod", pl_module.net)).cpu()
            spec = InputSpec.from_hparams(pl_module.hparams)
        # A threshold the user fixed (task.threshold) is the task's, and stays.
        chosen = self.calibrator.choose_threshold and getattr(
            pl_module.task, "choose_threshold", True
        )
        calibrator = replace(self.calibrator, choose_threshold=chosen)
        self.result = calibrator.fit(net, spec, self._val(trainer))
        updates = self.result.spec_updates
        threshold = updates.get("threshold", pl_module.decision.threshold)
        trust = {k: updates.get(k) for k in ("temperature", "reject", "conformal")}
        pl_module.task.decide(threshold, **trust)  # the task has it: test, export carry it
        if best and trainer.is_global_zero:  # and the best checkpoint, for what loads it later
            update_checkpoint(best, best, updates)
        return self.result
