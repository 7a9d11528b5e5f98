"""Crash-safe file writes: write a hidden temp file beside the target, then rename it over.

``os.replace`` is atomic on POSIX and Windows, so a reader sees either the previous complete
file or the new complete one — never a half-written file, even if the process is killed or a
check on the new file fails. Every file a command writes goes through here: checkpoints,
weights, exports (``atomic_paths`` for OpenVINO's ``.xml``/``.bin`` pair), ``meta.json``,
reports, ``results.json``, ``config_resolved.yaml``, caches and CSVs (``atomic_write_text``
for small text files), plots (``atomic_savefig``). Every landing is one ``replace_atomically``
call (``tests/test_fileio.py`` records them to list what a command wrote this way).

Temp files are hidden (``.<name>...tmp...``): a kill can leave one behind, but never under a
final name, and ``is_temp_file`` tells them apart.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
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


def replace_atomically(
    tmp: str | os.PathLike, filepath: str | os.PathLike, *, synced: bool = False
) -> None:
    """fsync ``tmp`` (unless ``synced``: the caller did), rename it over ``filepath``, fsync
    the folder (a symlink at ``filepath`` is replaced itself, its target is left alone)."""
    if not synced:
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


def atomic_write_text(filepath: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``filepath`` through ``atomic_path``; return the path."""
    with atomic_path(filepath) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(filepath)


def atomic_savefig(fig, filepath: str | os.PathLike, **savefig_kwargs) -> Path:
    """Save a matplotlib ``fig`` to ``filepath`` through ``atomic_path`` (the format is the
    target's suffix, e.g. ``.png``); return the path."""
    path = Path(filepath)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip("."), **savefig_kwargs)
    return path


def pair_temp_path(filepath: str | os.PathLike) -> Path:
    """``folder/.<stem>.<pid>.tmp<suffix>``: files of one pair (``model.xml``/``model.bin``)
    share a temp stem, as writers that derive one name from the other expect."""
    path = Path(filepath)
    return path.with_name(f".{path.stem}.{os.getpid()}{TMP_SUFFIX}{path.suffix}")


@contextmanager
def atomic_paths(*filepaths: str | os.PathLike) -> Iterator[list[Path]]:
    """Temp paths for files that belong together; they land together or not at all.

    On success each is fsynced and renamed in the order given; the LAST one is the entry a
    reader opens (OpenVINO's ``.xml``): it is removed first and renamed last, so a reader never
    sees it with a missing or stale companion (between the renames it sees no entry at all).
    If the block raises, every temp file is deleted and the targets are left as they were.
    """
    paths = [Path(p) for p in filepaths]
    if not paths:
        raise ValueError("atomic_paths needs at least one file path.")
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
    temps = [pair_temp_path(p) for p in paths]
    with ExitStack() as cleanup:
        for tmp in temps:
            cleanup.callback(tmp.unlink, missing_ok=True)
        yield temps
        for tmp in temps:
            if not tmp.is_file():
                raise FileNotFoundError(f"The writer did not create {tmp.name}; nothing replaced.")
            fsync_file(tmp)
        paths[-1].unlink(missing_ok=True)
        for tmp, path in zip(temps, paths):
            replace_atomically(tmp, path, synced=True)


@contextmanager
def atomic_dir(dirpath: str | os.PathLike) -> Iterator[Path]:
    """A temp folder path (suffix kept) to write a folder-shaped artifact at (Core ML's
    ``.mlpackage``); on success it replaces ``dirpath`` (an old one is renamed aside first,
    then removed), else it is removed and ``dirpath`` is left as it was."""
    path = Path(dirpath)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, old = temp_path_for(path, keep_suffix=True), temp_path_for(path.with_suffix(".old"))
    try:
        yield tmp
        if not tmp.is_dir():
            raise FileNotFoundError(f"The writer did not create {tmp.name}; nothing replaced.")
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        for leftover in (tmp, old):
            if leftover.is_dir():
                shutil.rmtree(leftover)


def is_temp_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a temp file of this module (hidden, ``.tmp`` in its name)."""
    name = Path(path).name
    return name.startswith(".") and f"{TMP_SUFFIX}" in name
