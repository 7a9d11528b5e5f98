"""``EarlyStopping``: Lightning's, and a run resumed after it stopped stays stopped.

Lightning's ``EarlyStopping`` saves its counters (best score, epochs waited, the epoch it
stopped at) in every checkpoint, so a run interrupted before the stop resumes them and stops at
the same epoch as the uninterrupted run. A run resumed from the checkpoint of the epoch it
stopped at (a requeued job that was killed while testing, ``ckpt_path=last``) would still train
one more epoch: ``trainer.should_stop`` is not part of the checkpoint. This subclass sets it again
when the restored state says the run had stopped, so the resumed run ends where the first one
ended (drop the callback, ``~callbacks.early_stopping``, to train on past the stop).
"""

from __future__ import annotations

import pytorch_lightning as pl
from pytorch_lightning.callbacks import EarlyStopping as _LightningEarlyStopping


class EarlyStopping(_LightningEarlyStopping):
    """``pytorch_lightning.callbacks.EarlyStopping`` whose stop survives a resume."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.stopped_epoch > 0 or self.wait_count >= self.patience > 0:
            trainer.should_stop = True  # the checkpoint is of the epoch this run stopped at
