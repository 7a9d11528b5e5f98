"""Decode-once cache for image folders: every image decoded (in parallel) into one uint8 array.

The first run decodes and resizes each file and writes ``<name>.npy`` (N, C, H, W) uint8 plus
``<name>.json`` (labels, skipped files, and a fingerprint of root, image size, channels and
every file's path, size and mtime). Later runs memory-map the array and start in seconds.
A fingerprint mismatch (a file added, removed or changed, another size) means the cache is
stale: it is rebuilt. Both files are written to temporary names and renamed into place, the
JSON last, so an interrupted build never leaves a cache that looks valid.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

from lightning_cls.fileio import atomic_path
from lightning_cls.inference.images import decode_image

log = logging.getLogger(__name__)

CACHE_VERSION = 2  # 2: aspect-preserving decode (shorter side, centre crop)
_CHUNK = 256  # files per decode task: large enough to amortize inter-process overhead


def _decode_chunk(paths: Sequence[str], image_size: int, num_channels: int, resize_size=None):
    out = np.zeros((len(paths), num_channels, image_size, image_size), np.uint8)  # (n, C, H, W)
    errors: list[tuple[int, str]] = []
    for i, path in enumerate(paths):
        try:
            out[i] = decode_image(path, image_size, num_channels, resize_size)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
            errors.append((i, f"{type(err).__name__}: {err}"))
    return out, errors


def decode_images(
    paths: Sequence[str],
    image_size: int,
    num_channels: int,
    workers: int = 1,
    resize_size: int | None = None,
) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """Decode ``paths`` into (N, C, H, W) uint8; returns the array and ``(index, error)`` pairs.

    Each image: shorter side to ``resize_size`` (default ``image_size``), centre square crop.

    Unreadable files leave zeros in their row; the caller decides to fail or drop them.
    """
    chunks = [paths[i : i + _CHUNK] for i in range(0, len(paths), _CHUNK)]
    if workers <= 1 or len(chunks) <= 1:
        results = [_decode_chunk(c, image_size, num_channels, resize_size) for c in chunks]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            n = len(chunks)
            results = list(
                pool.map(
                    _decode_chunk, chunks, [image_size] * n, [num_channels] * n, [resize_size] * n
                )
            )
    if not results:
        return np.zeros((0, num_channels, image_size, image_size), np.uint8), []
    errors = [(k * _CHUNK + i, e) for k, (_, errs) in enumerate(results) for i, e in errs]
    return np.concatenate([arr for arr, _ in results]), errors


def fingerprint(
    root: str, files: Sequence[str], image_size: int, num_channels: int, extra: str = ""
) -> str:
    """Hash of everything that determines the decoded array (and ``extra``: whatever else the
    cached metadata depends on, e.g. labels read from an index file rather than the paths)."""
    h = hashlib.sha256()
    h.update(json.dumps([CACHE_VERSION, os.path.abspath(root), image_size, num_channels]).encode())
    h.update(extra.encode())
    for f in files:
        st = os.stat(f)
        h.update(f"{os.path.relpath(f, root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def cache_name(root: str, split: str, image_size: int, num_channels: int) -> str:
    tag = hashlib.sha256(os.path.abspath(root).encode()).hexdigest()[:10]
    return f"{split}-{image_size}px-{num_channels}ch-{tag}"


def load_cache(cache_dir: Path, name: str, expected: str) -> tuple[np.ndarray, dict] | None:
    """The cached (images, meta) if present and its fingerprint is ``expected``, else None."""
    meta_path, array_path = cache_dir / f"{name}.json", cache_dir / f"{name}.npy"
    if not meta_path.exists() or not array_path.exists():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("fingerprint") != expected:
            log.warning("Image cache %s is stale (files changed); rebuilding it.", array_path)
            return None
        images = np.load(array_path, mmap_mode="c")  # copy-on-write memory map: lazy, writable
    except (OSError, ValueError) as err:
        log.warning("Image cache %s is unreadable (%s); rebuilding it.", array_path, err)
        return None
    if images.shape[0] != len(meta["labels"]):
        log.warning("Image cache %s does not match its index; rebuilding it.", array_path)
        return None
    return images, meta


def write_cache(cache_dir: Path, name: str, images: np.ndarray, meta: dict) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    with atomic_path(cache_dir / f"{name}.npy") as tmp, open(tmp, "wb") as f:
        np.save(f, images)  # to an open file: np.save would add ".npy" to a bare temp name
    with atomic_path(cache_dir / f"{name}.json") as tmp:
        tmp.write_text(json.dumps(meta))


def writable_cache_dir(root: str, cache_dir: str | None) -> Path:
    """``cache_dir`` if given, else ``<root>/.lightning_cls_cache``, else the user cache dir."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    beside = Path(root) / ".lightning_cls_cache"
    if os.access(root, os.W_OK):
        return beside
    user = Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "lightning_cls"
    log.info("%s is read-only; caching decoded images in %s instead.", root, user)
    return user
