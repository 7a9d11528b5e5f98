"""The on-disk form of a streamed dataset: litdata chunks per split, and ``dataset.json``.

``write_streaming`` (what ``python -m lightning_cls.optimize_data`` calls) writes
``<out>/<split>/`` chunk folders of ``{"index", "image" (C, H, W) uint8, "label"}`` items and
``<out>/dataset.json``, the dataset's description: classes, mean/std, the stored image size,
channels, task and the count of each split. Folders written before the description had its own
name hold it as ``meta.json`` (also the name of an exported model's spec file); it is still read.
``read_description`` reads it from a folder or an object store for ``StreamingDataModule``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

DATASET_FILE = "dataset.json"
LEGACY_DATASET_FILE = "meta.json"
REMOTE = ("s3://", "gs://", "gcs://", "azure://", "az://", "r2://", "hf://")
WRITTEN_BY = "`python -m lightning_cls.optimize_data data=... out=...`"


def litdata():
    try:
        import litdata
    except ImportError as err:
        raise ImportError(
            "data=streaming needs litdata: pip install 'lightning-cls[streaming]' (or pip install litdata)."
        ) from err
    return litdata


def write_streaming(
    splits: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    meta: Mapping,
    out_dir: str | Path,
    chunk_bytes: str = "64MB",
    progress: bool = True,
) -> Path:
    """Write ``{split: (images (N, C, H, W) uint8, labels (N,))}`` as litdata chunks, and
    ``meta`` (classes, mean, std, image_size, num_channels) with the counts as dataset.json.

    Multi-label splits have (N, K) multi-hot labels: each sample's label is then a (K,) uint8
    tensor (set ``meta["task"] = "multilabel"``; ``optimize_data`` does).

    Everything is written into a temporary sibling folder that is renamed to ``out_dir`` at
    the end: an interrupted conversion never leaves a folder that looks complete.
    """
    litdata()
    from litdata.streaming.writer import BinaryWriter
    from tqdm import tqdm

    out = Path(out_dir).expanduser()
    if out.exists():
        raise FileExistsError(f"{out} already exists; remove it or choose another out=.")
    tmp = Path(
        tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent if out.parent.exists() else None)
    )
    counts = {}
    try:
        for name, (images, labels) in splits.items():
            if images.dtype != torch.uint8 or images.ndim != 4:
                raise TypeError(
                    f"split {name}: expected (N, C, H, W) uint8, got {images.dtype} {tuple(images.shape)}."
                )
            writer = BinaryWriter(str(tmp / name), chunk_bytes=chunk_bytes)
            for i in tqdm(range(len(labels)), desc=f"{name} -> chunks", disable=not progress):
                writer[i] = {
                    "index": i,
                    "image": images[i].contiguous(),
                    "label": _label(labels[i]),
                }
            writer.done()
            writer.merge()
            counts[name] = len(labels)
        description = {**dict(meta), "counts": counts}
        (tmp / DATASET_FILE).write_text(json.dumps(description, indent=2))
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(tmp), str(out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def read_description(input_dir: str, cache_dir: Callable[[], str], storage_options: dict) -> dict:
    """``dataset.json`` (or the legacy ``meta.json``) of a folder or an object-store URL (then
    downloaded into ``cache_dir()``)."""
    if input_dir.startswith(REMOTE):
        return _download(input_dir, Path(cache_dir()), storage_options)
    folder = Path(input_dir).expanduser()
    path = folder / DATASET_FILE
    if not path.is_file() and (folder / LEGACY_DATASET_FILE).is_file():
        path = folder / LEGACY_DATASET_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{folder / DATASET_FILE} not found: data.input_dir must be a folder written by "
            f"{WRITTEN_BY}."
        )
    return _checked(json.loads(path.read_text()), path)


def _download(url: str, local: Path, storage_options: dict) -> dict:
    from litdata.streaming.downloader import get_downloader

    downloader = get_downloader(url, str(local), [], storage_options)
    errors = []
    for name in (DATASET_FILE, LEGACY_DATASET_FILE):
        try:
            downloader.download_file(f"{url}/{name}", str(local / name))
        except Exception as err:  # noqa: BLE001  (boto/obstore raise their own types)
            errors.append(err)
            continue
        return _checked(json.loads((local / name).read_text()), f"{url}/{name}")
    err = errors[0]  # the current name's: auth, network, or missing
    raise ConnectionError(
        f"Cannot read {url}/{DATASET_FILE} ({type(err).__name__}: {err}). For an object store, "
        "give credentials in the environment (e.g. AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE) or data.storage_options, and check the URL."
    ) from err


def _checked(description, source) -> dict:
    """A dataset description, or a one-line error for another kind of file (an artifact's)."""
    if not isinstance(description, dict) or "counts" not in description:
        raise ValueError(
            f"{source} is not a dataset description (it has no 'counts'; an exported model's "
            f"meta.json?): data.input_dir must be a folder written by {WRITTEN_BY}."
        )
    return description


def _label(label: torch.Tensor) -> int | torch.Tensor:
    """A stored label: a class index, or a multi-hot (K,) uint8 row (multi-label)."""
    return label.to(torch.uint8).contiguous() if label.ndim else int(label)


def labels_of(items: Sequence[dict]) -> torch.Tensor:
    """(B,) int64 class indices, or (B, K) float32 multi-hot rows (multi-label chunks)."""
    first = items[0]["label"] if items else 0
    if isinstance(first, torch.Tensor) and first.ndim:
        return torch.stack([torch.as_tensor(it["label"]) for it in items]).float()
    return torch.tensor([int(it["label"]) for it in items], dtype=torch.int64)


def collate(items: Sequence[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stored items -> a uint8 batch (B, C, H, W) and its labels."""
    images = torch.stack([torch.as_tensor(it["image"]) for it in items])  # (B, C, H, W) uint8
    return images, labels_of(items)
