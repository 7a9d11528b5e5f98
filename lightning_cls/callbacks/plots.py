"""``TrainingPlots``: ``curves.png`` at the end of fit and, after testing, the figures the task
draws (``TrainingTask.test_figures``: multi-class ``confusion_matrix.png``, a per-class
accuracy table and ``per_class_accuracy.png``; multi-label ``per_label_scores.png``, average
precision per label), all in the run directory.

The epoch history is kept by the callback itself (so it does not depend on which logger is
configured) and travels in checkpoints, so a resumed run draws the whole curve. The confusion
matrix is the multi-class task's own test confusion metric (a torchmetrics
``MulticlassConfusionMatrix`` fed by ``test_step`` with the logits it scores, flip TTA
included, and summed over DDP ranks by torchmetrics), so no second forward pass is needed.

The drawing is ``lightning_cls.figures.plots``'s (every figure lives in ``figures/``); this
callback only decides when to draw and where.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytorch_lightning as pl
import torch

from lightning_cls.figures.plots import CURVES, plot_curves

log = logging.getLogger(__name__)

# Logged by the module's own on_train_epoch_end, which Lightning calls after the callbacks'.
LATE = ("train/acc", "train/loss_epoch")  # both logged by the module's on_train_epoch_end


class TrainingPlots(pl.Callback):
    """``dirpath`` defaults to the trainer's ``default_root_dir`` (the run directory)."""

    def __init__(self, dirpath: str | None = None):
        self.dirpath = dirpath
        self.history: list[dict[str, float]] = []
        self.matrix: torch.Tensor | None = None

    def _dir(self, trainer: pl.Trainer) -> Path:
        path = Path(self.dirpath or trainer.default_root_dir)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module) -> None:
        metrics = self._curve_metrics(trainer)  # train/acc here would be last epoch's value
        self.history.append(
            {"epoch": trainer.current_epoch, **{k: v for k, v in metrics.items() if k not in LATE}}
        )

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module) -> None:
        self._complete_last_row(trainer)

    def _complete_last_row(self, trainer: pl.Trainer) -> None:
        # Callbacks' on_train_epoch_end runs before the module's, which logs the LATE keys; the
        # epoch's row is completed once those values exist (next epoch start or fit end).
        row = self.history[-1] if self.history else None
        if row is not None and not any(k in row for k in LATE):
            row.update({k: v for k, v in self._curve_metrics(trainer).items() if k in LATE})

    @staticmethod
    def _curve_metrics(trainer: pl.Trainer) -> dict[str, float]:
        keys = {k for keys in CURVES.values() for k in keys}
        return {
            k: float(trainer.callback_metrics[k]) for k in keys if k in trainer.callback_metrics
        }

    def on_fit_end(self, trainer: pl.Trainer, pl_module) -> None:
        self._complete_last_row(trainer)
        if self.history and trainer.is_global_zero:
            path = self._dir(trainer) / "curves.png"
            plot_curves(self.history, path)
            log.info("Saved %s", path)

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        """The task's test figures (``TrainingTask.test_figures``: multi-class the confusion
        matrix and per-class accuracy, multi-label the per-label scores), from the epoch's
        tensors: every rank computes them (they sync), rank zero draws them."""
        task = getattr(pl_module, "task", None)
        if task is None or not hasattr(task, "test_figures"):
            log.info("%s has no task with test figures: none drawn.", type(pl_module).__name__)
            self.figures = {}
            return
        classes = list(getattr(pl_module, "classes", None) or [])
        self.figures = task.test_figures(task.epoch_tensors("test"), classes)

    def on_test_end(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero:
            return
        for name, draw in getattr(self, "figures", {}).items():
            path = self._dir(trainer) / name
            draw(path)
            log.info("Saved %s", path)

    def state_dict(self) -> dict:
        return {"history": self.history}

    def load_state_dict(self, state_dict: dict) -> None:
        self.history = list(state_dict.get("history", []))
