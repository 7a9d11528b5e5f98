"""``AtomicModelCheckpoint``: a ModelCheckpoint whose files are never half-written.

Lightning's ``TorchCheckpointIO`` writes through an fsspec transaction whose temporary file
lives in the system temp dir; when that is another filesystem the final move is a copy, and a
process killed during it leaves a truncated ``last.ckpt`` (nothing is fsync'ed either). Here
every checkpoint is first written to a hidden temp file in the destination folder, fsync'ed,
then renamed over the target with ``os.replace`` — atomic on POSIX and Windows — so a reader
(or a resumed run) sees either the previous complete file or the new complete file.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from weakref import proxy

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_cls.fileio import TMP_SUFFIX, fsync_dir, replace_atomically, temp_path_for

log = logging.getLogger(__name__)


class AtomicModelCheckpoint(ModelCheckpoint):
    """Drop-in ``ModelCheckpoint`` (same arguments) with crash-safe writes."""

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if trainer.is_global_zero and self.dirpath and os.path.isdir(self.dirpath):
            self._remove_stale_temp_files(Path(self.dirpath))

    @staticmethod
    def _remove_stale_temp_files(folder: Path) -> None:
        for stale in folder.glob(f".*.ckpt.*{TMP_SUFFIX}"):
            log.info("Removing %s, left by a run killed while saving.", stale)
            stale.unlink(missing_ok=True)

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        tmp = temp_path_for(filepath)
        trainer.save_checkpoint(tmp, self.save_weights_only)  # ends with a barrier
        if trainer.is_global_zero:
            if tmp.is_dir():  # sharded strategies (FSDP/DeepSpeed) write folders
                self._replace_folder(tmp, Path(filepath))
            else:
                replace_atomically(tmp, filepath)
        trainer.strategy.barrier("AtomicModelCheckpoint._save_checkpoint")
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.after_save_checkpoint(proxy(self))

    @staticmethod
    def _link_checkpoint(trainer: pl.Trainer, filepath: str, linkpath: str) -> None:
        # save_last="link": build the new symlink beside the old one, then rename it over.
        if trainer.is_global_zero and os.path.abspath(filepath) != os.path.abspath(linkpath):
            tmp = temp_path_for(linkpath)
            tmp.unlink(missing_ok=True)
            try:
                os.symlink(os.path.relpath(filepath, os.path.dirname(linkpath)), tmp)
            except OSError:  # Windows without symlink rights: copy, as Lightning does
                shutil.copy(filepath, tmp)
            os.replace(tmp, linkpath)
            fsync_dir(os.path.dirname(os.path.abspath(linkpath)))
        trainer.strategy.barrier()

    @staticmethod
    def _replace_folder(tmp: Path, target: Path) -> None:
        # A folder cannot be swapped atomically over a non-empty one; move the old one aside
        # first so at least one complete copy exists at every moment.
        old = target.with_name(f".{target.name}.old")
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
        if old.exists():
            shutil.rmtree(old, ignore_errors=True)
