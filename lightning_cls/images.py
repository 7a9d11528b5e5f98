"""Reading image files for inference and writing prediction CSVs (no Hydra here)."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import UnidentifiedImageError

from lightning_cls.data.augment import normalize
from lightning_cls.data.decode import IMAGE_SUFFIXES, decode_image
from lightning_cls.fileio import atomic_path


def find_images(inputs: Iterable[str | Path]) -> list[Path]:
    """Expand files and folders (recursively) into a sorted list of candidate files.

    Inside folders only image suffixes are taken; files named explicitly are always kept, so
    a non-image given on purpose is reported, not ignored.
    """
    files: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        elif path.exists():
            files.append(path)
        else:
            raise FileNotFoundError(f"Input not found: {path}; give image files or a folder.")
    if not files:
        raise FileNotFoundError(f"No image files found in {', '.join(map(str, inputs))}.")
    return files


def load_image_batch(
    paths: Sequence[Path],
    image_size: int,
    num_channels: int,
    mean: Sequence[float],
    std: Sequence[float],
) -> tuple[torch.Tensor, list[Path], list[tuple[Path, str]]]:
    """Read and normalize ``paths``; return (batch, paths read, [(path, reason)] failed)."""
    arrays, ok, failed = [], [], []
    for path in paths:
        try:
            arrays.append(decode_image(path, image_size, num_channels))
            ok.append(path)
        except UnidentifiedImageError:
            failed.append((path, "not a readable image"))
        except (OSError, ValueError, SyntaxError) as err:
            failed.append((path, f"corrupt or unreadable image ({err})"))
    if not arrays:
        return torch.empty(0), ok, failed
    batch = torch.from_numpy(np.stack(arrays))  # (B, C, H, W) uint8
    return normalize(batch, mean, std), ok, failed


def write_predictions_csv(
    output: str | Path, rows: list[dict], failures: list[tuple[Path, str]], top_k: int
) -> None:
    """One row per file: file, label_1..k, prob_1..k, error (empty unless it failed).

    Written to a temp file renamed over ``output``: an earlier CSV is never left half-written.
    """
    header = ["file"] + [f"label_{i + 1}" for i in range(top_k)]
    header += [f"prob_{i + 1}" for i in range(top_k)] + ["error"]
    with atomic_path(output) as tmp, tmp.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        for row in rows:
            labels = row["labels"] + [""] * (top_k - len(row["labels"]))
            probs = [f"{p:.6f}" for p in row["probs"]] + [""] * (top_k - len(row["probs"]))
            writer.writerow([row["file"], *labels, *probs, ""])
        for path, reason in failures:
            writer.writerow([str(path)] + [""] * (2 * top_k) + [reason])
