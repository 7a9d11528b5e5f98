"""``AtomicCheckpointIO``: a Lightning ``CheckpointIO`` plugin whose files are never half-written.

Lightning's ``TorchCheckpointIO`` writes through an fsspec transaction whose temporary file
lives in the system temp dir; when that is another filesystem the final move is a copy, and a
process killed during it leaves a truncated ``last.ckpt`` (nothing is fsync'ed either). This
plugin writes every checkpoint to a hidden temp file in the destination folder, fsyncs it,
renames it over the target with ``os.replace`` (atomic on POSIX and Windows) and fsyncs the
folder, so a reader — or a resumed run — sees either the previous complete file or the new
complete one.

``CheckpointIO`` is Lightning's documented extension point for how checkpoint bytes reach
disk: every writer goes through it (``ModelCheckpoint``, ``trainer.save_checkpoint``), so the
plain ``ModelCheckpoint`` callback gets crash-safe files with no private override. Pass it as
``Trainer(plugins=[AtomicCheckpointIO()])`` (``conf/trainer/default.yaml`` does). Remote
paths (``s3://``…) fall back to Lightning's own writer: a rename there is not atomic anyway.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from fsspec.implementations.local import LocalFileSystem
from lightning_fabric.plugins.io import TorchCheckpointIO
from lightning_fabric.utilities.cloud_io import get_filesystem

from lightning_cls.fileio import TMP_SUFFIX, atomic_path

log = logging.getLogger(__name__)


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` with crash-safe local writes (temp file, fsync, ``os.replace``)."""

    def save_checkpoint(
        self,
        checkpoint: dict[str, Any],
        path: str | os.PathLike,
        storage_options: Any | None = None,
    ) -> None:
        if not isinstance(get_filesystem(path), LocalFileSystem):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        if storage_options is not None:
            raise TypeError(
                f"storage_options={storage_options!r} is not supported by AtomicCheckpointIO; "
                "call trainer.save_checkpoint without storage_options."
            )
        remove_stale_temp_files(Path(path))
        with atomic_path(path) as tmp:
            self.write(checkpoint, tmp)

    def write(self, checkpoint: dict[str, Any], path: Path) -> None:
        """Serialize ``checkpoint`` to ``path`` (the temp file). Override to change the format."""
        torch.save(checkpoint, path)


def remove_stale_temp_files(target: Path) -> None:
    """Delete ``.<name>.<pid>.tmp`` files of ``target`` left by a run killed while saving."""
    ours = f".{target.name}.{os.getpid()}{TMP_SUFFIX}"
    for stale in target.parent.glob(f".{target.name}.*{TMP_SUFFIX}"):
        if stale.name != ours:
            log.info("Removing %s, left by a run killed while saving.", stale)
            stale.unlink(missing_ok=True)
