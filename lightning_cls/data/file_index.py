"""A file index that filters an image folder: ``data.index=clean.csv`` keeps only listed files.

The CSV is the one ``python -m lightning_cls.doctor doctor.write_index=clean.csv`` writes:
a ``file`` column (paths relative to ``data.root``, or absolute), optionally ``labels`` and
``split`` columns (ignored here: the folder an image sits in decides its class and split), so
the same rows also read as a ``data=multilabel`` index (``file,labels``). A header row naming
``file`` is optional; without one the first column is the file. A listed file that does not
exist is an error naming its row; an image that is not listed is left out.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import torch

from lightning_cls.data.memory import carve_val
from lightning_cls.inference.spec import Split


def read_file_index(index: str | os.PathLike, root: str | os.PathLike) -> set[str]:
    """The absolute, normalized paths ``index`` lists (relative rows resolve against ``root``)."""
    path = Path(index).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"data.index={index} not found; pass the CSV that `python -m lightning_cls.doctor "
            "doctor.write_index=...` wrote (a 'file' column, paths relative to data.root)."
        )
    keep: set[str] = set()
    column = 0
    with path.open(newline="", encoding="utf-8-sig") as fh:
        for line, row in enumerate(csv.reader(fh), start=1):
            if not row or not row[0].strip():
                continue
            names = [c.strip().lower() for c in row]
            if line == 1 and "file" in names:
                column = names.index("file")
                continue
            listed = row[column].strip()
            file = Path(root, listed) if not os.path.isabs(listed) else Path(listed)
            if not file.is_file():
                raise FileNotFoundError(
                    f"{path}:{line} lists {listed}, which is not a file ({file}); paths are "
                    "relative to data.root: fix or remove the row, or write the index again."
                )
            keep.add(normalized(file))
    if not keep:
        raise ValueError(f"data.index={index} lists no files; write one row per image to keep.")
    return keep


def normalized(path: str | os.PathLike) -> str:
    """One spelling per file (absolute, ``..`` resolved) to compare listed and scanned paths."""
    return os.path.normpath(os.path.abspath(path))


def files_of_splits(data, files_by_folder: dict[str, list[str]], labels_by_folder: dict) -> dict:
    """The file behind each row of ``data.splits[name]``: ``data``'s test hold-out and
    validation carve, run on row numbers instead of pixels. ``files_by_folder``: the decoded
    files of each folder split (``train``, optional ``val``/``test``) in row order."""
    if not data.splits or "train" not in files_by_folder:
        raise ValueError("split_files() needs the splits this DataModule read; call setup().")
    files = {name: list(found) for name, found in files_by_folder.items()}
    rows = {}
    for name, found in files.items():
        # Class indices stratify the carve and the folds as setup() did; other tasks' rows
        # stand in as (N, 1), which hold_out carves at random, as it did their label rows.
        if data.task == "multiclass":
            labels = torch.as_tensor(labels_by_folder[name])  # (N,)
        else:
            labels = torch.zeros(len(found), 1)  # (N, 1)
        rows[name] = Split(torch.arange(len(found)), labels)  # (N,) row numbers
    if data.folds and "val" in rows:  # carve_val pools train and val before the folds
        rows["val"] = Split(rows["val"].images + len(files["train"]), rows["val"].labels)
        files["train"] += files.pop("val")
    owner = {name: name if name in files else "train" for name in ("train", "val", "test")}
    read = carve_val(data._hold_out_test(rows), data.val_size, data.folds, data.fold, data.seed)
    return {
        name: [files[owner[name]][i] for i in split.images.tolist()] for name, split in read.items()
    }


def unreadable_of(files: list[str], skipped: list[str]) -> set[str]:
    """The files named by cached ``"<file>: <error>"`` entries (a path may contain ": ")."""
    known, bad = set(files), set()
    for entry in skipped:
        cuts = [i for i in range(len(entry)) if entry.startswith(": ", i)]
        bad.update(entry[:i] for i in cuts if entry[:i] in known)
    return bad
