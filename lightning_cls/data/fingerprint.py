"""Data fingerprints: one sha256 that says which files a run read, so two runs can be shown to
have read the same images (``results.json`` and every artifact carry it as ``data_fingerprint``).

The fingerprint of a DataModule's index (its ``index_files``: every image it reads, and for
``data=multilabel`` the CSV/JSON indexes that give the labels) is the sha256 of the sorted lines
``<path relative to data.root>\\t<sha256 of the file's bytes>\\n``, after a version line. Paths
hold the class folder (``train/cat/0001.png``), so moving an image to another class or split
changes it; file times, the decode cache and ``data.root``'s own location do not.

Hashing every byte is paid once: the content hashes are cached in ``fingerprint-<tag>.json``
in the decode cache's folder (``<root>/.lightning_cls_cache``, or the user cache dir where the
root is read-only, or ``data.cache_dir``), keyed by path, size and modification time, so a
second run reads only the file list and the cache (an entry no older than the cache file
itself is hashed again: git's rule for "racy" timestamps). The cache also keeps the file lists of the
last ``KEPT_MANIFESTS`` fingerprints, so ``data.expect_fingerprint`` can say what changed
(files added, removed, modified) since the one it expected.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lightning_cls.fileio import atomic_write_text

log = logging.getLogger(__name__)

FINGERPRINT_VERSION = 1
KEPT_MANIFESTS = 4  # file lists of past fingerprints kept in the cache, for "what changed"
_BLOCK = 1 << 20


@dataclass(frozen=True)
class Fingerprint:
    """``hexdigest`` of the index; ``files``: relative path -> sha256 of its content."""

    hexdigest: str
    files: dict[str, str] = field(repr=False)


@dataclass(frozen=True)
class DataIndex:
    """What a DataModule reads: ``files`` under ``root``; content hashes cached in
    ``cache_dir`` (None: not cached)."""

    root: Path
    files: list[str] = field(repr=False)
    cache_dir: Path | None = None

    def fingerprint(self) -> Fingerprint:
        return fingerprint_files(self.root, self.files, self.cache_dir)


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


def digest(files: dict[str, str]) -> str:
    """The fingerprint of ``{relative path: content sha256}`` (order does not matter)."""
    h = hashlib.sha256(f"lightning_cls data fingerprint v{FINGERPRINT_VERSION}\n".encode())
    for name in sorted(files):
        h.update(f"{name}\t{files[name]}\n".encode())
    return h.hexdigest()


def cache_path(cache_dir: str | os.PathLike, root: str | os.PathLike) -> Path:
    tag = hashlib.sha256(os.path.abspath(root).encode()).hexdigest()[:10]
    return Path(cache_dir) / f"fingerprint-{tag}.json"


def fingerprint_files(
    root: str | os.PathLike,
    files: Sequence[str | os.PathLike],
    cache_dir: str | os.PathLike | None = None,
) -> Fingerprint:
    """The fingerprint of ``files`` (paths under ``root``); content hashes come from and go to
    the cache in ``cache_dir`` (None: no cache, every file is read)."""
    root = os.path.abspath(root)
    cache_file = cache_path(cache_dir, root) if cache_dir is not None else None
    cache = _read_cache(cache_file)
    known: dict = cache["files"]
    hashes, stats, hashed = {}, {}, 0
    for file in files:
        name = Path(os.path.relpath(os.path.abspath(file), root)).as_posix()
        try:
            st = os.stat(file)
            stat = [st.st_size, st.st_mtime_ns]
            entry = known.get(name)
            # Trusted only if older than the cache file (git's "racy" rule): a file rewritten
            # with the same size within the clock's granularity of the last run keeps its mtime.
            if entry is not None and entry[:2] == stat and stat[1] < cache["written_ns"]:
                hashes[name] = entry[2]
            else:
                hashes[name], hashed = file_sha256(file), hashed + 1
            stats[name] = [*stat, hashes[name]]
        except OSError as err:  # the decode step names it (data.on_corrupt); not cached
            hashes[name] = f"unreadable: {type(err).__name__}"
    found = Fingerprint(digest(hashes), hashes)
    if cache_file is not None and (hashed or found.hexdigest not in cache["manifests"]):
        manifests = {k: v for k, v in cache["manifests"].items() if k != found.hexdigest}
        kept = list(manifests.items())[-(KEPT_MANIFESTS - 1) :] + [(found.hexdigest, hashes)]
        _write_cache(cache_file, {"version": FINGERPRINT_VERSION, "root": root,
                                  "files": stats, "manifests": dict(kept)})  # fmt: skip
    log.info("Data fingerprint of %s: %s (%d files, %d hashed)", root, found.hexdigest,
             len(hashes), hashed)  # fmt: skip
    return found


def check_fingerprint(
    found: Fingerprint | None,
    expected: str | None,
    what: str,
    index: DataIndex | None = None,
    reason: str = "",
) -> None:
    """Refuse data whose fingerprint is not ``expected`` (``data.expect_fingerprint``; None:
    anything goes) in one line naming both and, where the expected file list is in ``index``'s
    cache, how many files were added, removed and modified. ``what`` names the data in the
    message; ``reason`` says why a source has no fingerprint (``found`` None)."""
    if expected is None:
        return
    expected = str(expected).strip().lower()
    if found is None:
        raise ValueError(
            f"data.expect_fingerprint={expected} but {what} has no fingerprint ({reason}); "
            "set data.expect_fingerprint=null."
        )
    if found.hexdigest == expected:
        return
    change = "what changed is unknown: the file list behind it is not in this machine's cache"
    if index is not None and index.cache_dir is not None:
        manifest = _read_cache(cache_path(index.cache_dir, index.root))["manifests"].get(expected)
        if manifest is not None:
            change = changes(manifest, found.files)
    raise ValueError(
        f"data.expect_fingerprint={expected} but {what} has fingerprint {found.hexdigest} "
        f"({change}); point data.root at the data that was fingerprinted, or set "
        f"data.expect_fingerprint={found.hexdigest} to accept this data."
    )


def changes(before: dict[str, str], after: dict[str, str]) -> str:
    """``"since then 2 file(s) added, 1 removed, 1 modified"``: two ``{path: sha256}`` lists."""
    added = len(after.keys() - before.keys())
    removed = len(before.keys() - after.keys())
    modified = sum(before[k] != after[k] for k in before.keys() & after.keys())
    return f"since then {added} file(s) added, {removed} removed, {modified} modified"


def _read_cache(path: Path | None) -> dict:
    empty = {"files": {}, "manifests": {}, "written_ns": 0}
    if path is None or not path.is_file():
        return empty
    try:
        written_ns = path.stat().st_mtime_ns
        cache = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        log.warning("Fingerprint cache %s is unreadable (%s); hashing the files again.", path, err)
        return empty
    if not isinstance(cache, dict) or cache.get("version") != FINGERPRINT_VERSION:
        return empty
    files, manifests = dict(cache.get("files") or {}), dict(cache.get("manifests") or {})
    return {"files": files, "manifests": manifests, "written_ns": written_ns}


def _write_cache(path: Path, cache: dict) -> None:
    """Best effort: a cache that cannot be written costs the next run a re-hash, not an error."""
    try:
        atomic_write_text(path, json.dumps(cache))
    except OSError as err:
        log.warning("Cannot write the fingerprint cache %s (%s); the next run hashes again.",
                    path, err)  # fmt: skip
