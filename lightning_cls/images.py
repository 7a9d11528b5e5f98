"""Writing prediction CSVs; finding and reading image files is ``lightning_cls.inference.images``
(re-exported here). No Hydra here."""

from __future__ import annotations

import csv
from pathlib import Path

from lightning_cls.fileio import atomic_path
from lightning_cls.inference.images import IMAGE_SUFFIXES, find_images, load_image_batch

__all__ = ["IMAGE_SUFFIXES", "find_images", "load_image_batch", "write_predictions_csv"]


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
