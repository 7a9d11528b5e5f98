"""``LRFinderPlot``: Lightning's ``LearningRateFinder`` that saves its plot and logs the advice.

``ClassificationModule`` builds its optimizer from a partial, so there is no ``lr``
attribute for the finder to overwrite: the suggestion is reported, not applied.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.callbacks import LearningRateFinder

from lightning_cls.figures.lr_finder import save_lr_finder_plot

log = logging.getLogger(__name__)


class LRFinderPlot(LearningRateFinder):
    def __init__(self, dirpath: str | None = None, **kwargs):
        kwargs.setdefault("update_attr", False)
        super().__init__(**kwargs)
        self.dirpath = dirpath
        self.suggestion: float | None = None

    def lr_find(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().lr_find(trainer, pl_module)
        if self.optimal_lr is None or not trainer.is_global_zero:
            return
        self.suggestion = self.optimal_lr.suggestion()
        folder = Path(self.dirpath or trainer.default_root_dir)
        folder.mkdir(parents=True, exist_ok=True)
        save_lr_finder_plot(self.optimal_lr, folder / "lr_finder.png")
        log.info(
            "LR finder suggests optimizer.lr=%.3g (plot: %s)",
            self.suggestion or float("nan"),
            folder / "lr_finder.png",
        )
