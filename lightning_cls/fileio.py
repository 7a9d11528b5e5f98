"""Crash-safe file writes: write a hidden temp file beside the target, then rename it over.

``os.replace`` is atomic on POSIX and Windows, so a reader sees either the previous complete
file or the new complete one — never a half-written file, even if the process is killed or a
check on the new file fails. Used for checkpoints, weights, exports, caches and CSVs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TMP_SUFFIX = ".tmp"


def fsync_file(path: str | os.PathLike) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_dir(path: str | os.PathLike) -> None:
    """Persist a rename: on POSIX the directory entry is only durable once the dir is synced."""
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path_for(filepath: str | os.PathLike, keep_suffix: bool = False) -> Path:
    """``folder/.<name>.<pid>.tmp``: hidden, in the target's folder (same filesystem).

    ``keep_suffix`` appends the target's suffix again (``.model.pt2.<pid>.tmp.pt2``) for
    writers that check it (``torch.export.save`` warns on a name not ending in ``.pt2``).
    """
    path = Path(filepath)
    suffix = path.suffix if keep_suffix else ""
    return path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}{suffix}")


def replace_atomically(tmp: str | os.PathLike, filepath: str | os.PathLike) -> None:
    """fsync ``tmp``, rename it over ``filepath``, fsync the folder (a symlink at
    ``filepath`` is replaced itself, its target is left alone)."""
    fsync_file(tmp)
    os.replace(tmp, filepath)
    fsync_dir(os.path.dirname(os.path.abspath(filepath)))


@contextmanager
def atomic_path(filepath: str | os.PathLike, keep_suffix: bool = False) -> Iterator[Path]:
    """Yield a temp path to write (and check) the file at; on success it replaces ``filepath``.

    If the block raises, the temp file is deleted and ``filepath`` keeps its previous content.
    """
    path = Path(filepath)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path_for(path, keep_suffix)
    try:
        yield tmp
        replace_atomically(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
