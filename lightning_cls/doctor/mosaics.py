"""The report's pictures: duplicate groups side by side, likely label errors with the given and
the likely label (and the report's verdict on them: TRUSTED or NOT TRUSTED, and why), and
images a file check flagged: which tiles, captioned how. The painting is
``lightning_cls.figures.tiles``'s (every figure lives in ``figures/``).

Each tile is captioned with its file's name (``split:row`` for in-memory data) and what was
found.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lightning_cls.doctor.report import probe_verdict
from lightning_cls.figures.tiles import draw_tiles


def duplicates_mosaic(
    groups: list[dict], image_of: Callable, caption_of: Callable, path: Path, limit: int
) -> Path | None:
    """One row per group (cross-split groups first), at most 6 copies shown per row."""
    if not groups:
        return None
    rows = []
    for group in groups[:limit]:
        colour = "red" if group["cross_split"] else "orange"
        rows.append([(image_of(s, r), caption_of(s, r), colour) for s, r in group["members"][:6]])
    shown = f"{min(limit, len(groups))} of {len(groups)}"
    title = f"Duplicate groups ({shown}; red: across splits, orange: within one split)"
    return draw_tiles(rows, title, path)


def tile_name(record: dict) -> str:
    """A finding's file name (its basename), or ``split:row`` for in-memory data."""
    file = record.get("file")
    return Path(file).name if file else f"{record['split']}:{record['row']}"


def label_issues_mosaic(
    issues: list[dict],
    image_of: Callable,
    classes: list[str],
    path: Path,
    limit: int,
    probe: dict | None = None,
) -> Path | None:
    """Flagged images, most confident mistake first: file name, given label, likely label
    (the probe's probability of it); ``probe`` (``result["label_probe"]``) puts the report's
    verdict on them over the tiles."""
    if not issues:
        return None
    tiles = [
        (
            image_of(issue["split"], issue["row"]),
            f"{tile_name(issue)}\ngiven {classes[issue['given']]}\n"
            f"likely {classes[issue['suggested']]} ({issue['suggested_prob']:.2f})",
            "red",
        )
        for issue in issues[:limit]
    ]
    per_row = 8
    rows = [tiles[i : i + per_row] for i in range(0, len(tiles), per_row)]
    title = (
        f"Likely label errors ({len(tiles)} of {len(issues)}): file, given label, likely label "
        "(the probe's probability)"
    )
    return draw_tiles(rows, title, path, probe_verdict(probe) if probe else None)


def flagged_mosaic(flagged: list[tuple[str, str, int, str]], image_of, path: Path, limit: int):
    """Images a file or content check flagged: (check, split, row, note) each; ``note`` names
    the file (or is empty for in-memory data: ``split:row`` then)."""
    if not flagged:
        return None
    tiles = [
        (image_of(s, r), f"{check}\n{note or f'{s}:{r}'}", "orange")
        for check, s, r, note in flagged
    ]
    per_row = 8
    tiles = tiles[:limit]
    rows = [tiles[i : i + per_row] for i in range(0, len(tiles), per_row)]
    return draw_tiles(rows, f"Flagged images ({len(tiles)} of {len(flagged)})", path)
