"""The cleaned index: the files to keep, as a CSV that the data sources read back.

Rows are ``file,labels,split`` with paths relative to ``data.root``: ``data=imagefolder
data.index=<csv>`` keeps only the listed files (``data/file_index.py``), and the ``file,labels``
columns are a ``data=multilabel`` index row for row. Unreadable files are never listed; what
else is left out is ``drop``: ``duplicates`` (one copy of each group is kept: the test copy
over val over train, so a leak is removed from the split that learns, never from the one that
scores) and ``label_issues`` (the images the label check flagged, only when its probe was
reliable: out-of-fold accuracy at least ``min_probe_accuracy``).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from lightning_cls.fileio import atomic_write_text

DROPPABLE = ("duplicates", "label_issues")
KEEP_FIRST = {"test": 0, "val": 1, "train": 2}  # which copy of a duplicate group stays


def dropped_rows(result: dict, drop) -> dict[tuple[str, int], str]:
    """(split, row) -> why it is left out."""
    unknown = sorted(set(drop) - set(DROPPABLE))
    if unknown:
        raise ValueError(
            f"doctor.drop has {unknown}; use a list of {', '.join(DROPPABLE)} (or [] to keep all "
            "readable files)."
        )
    out: dict[tuple[str, int], str] = {}
    if "duplicates" in drop:
        for group in result["duplicates"]:
            members = sorted(map(tuple, group["members"]), key=lambda m: (KEEP_FIRST[m[0]], m[1]))
            for member in members[1:]:
                out[member] = "duplicate"
    if "label_issues" in drop and result.get("label_probe", {}).get("reliable", True):
        for issue in result["label_issues"]:
            out.setdefault((issue["split"], issue["row"]), "label_issue")
    return out


def check_indexable(path, views, data_name: str, root) -> None:
    """Refuse ``write_index`` for data without files, before any check runs."""
    if any(v.files is None for v in views.values()) or root is None:
        raise ValueError(
            f"doctor.write_index={path} needs image files to list, and data={data_name} is "
            "held in memory; use it with data=imagefolder or data=multilabel."
        )


def write_clean_index(path, views, classes: list[str], result: dict, drop, root) -> dict:
    """Write the CSV; returns its path and the counts kept and left out."""
    check_indexable(path, views, result["data"], root)
    leave_out = dropped_rows(result, drop)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["file", "labels", "split"])
    kept = 0
    for view in views.values():
        for row, file in enumerate(view.files):
            if (view.name, row) in leave_out:
                continue
            writer.writerow(
                [relative_path(file, root), _label_text(view.labels[row], classes), view.name]
            )
            kept += 1
    atomic_write_text(path, buffer.getvalue())
    reasons = list(leave_out.values())
    return {
        "path": str(path),
        "kept": kept,
        "left_out": {why: reasons.count(why) for why in sorted(set(reasons))},
        "unreadable_not_listed": len(result["files"].get("unreadable", [])),
    }


def relative_path(file: str, root) -> str:
    """``file`` relative to ``data.root`` (as POSIX), or as given when it lies outside."""
    rel = os.path.relpath(file, root)
    return file if rel.startswith("..") else Path(rel).as_posix()


def _label_text(label, classes: list[str]) -> str:
    if label.ndim == 0:
        return classes[int(label)]
    return ";".join(classes[i] for i in label.nonzero().flatten().tolist())
