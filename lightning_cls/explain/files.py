"""Explain image files into a folder: one overlay PNG per (image, explained class), a CSV
listing them, and a mosaic of the images under their heat maps with true/predicted labels.

Files inside a folder named after a class (an ImageFolder layout) have a known truth: the
mosaic marks wrong predictions, as ``predict``'s does.
"""

from __future__ import annotations

import csv
import io
import logging
import re
from collections.abc import Sequence
from pathlib import Path

import torch

from lightning_cls.explain.explainer import Explainer
from lightning_cls.figures.overlay import save_overlay
from lightning_cls.fileio import atomic_write_text
from lightning_cls.inference.images import load_image_batch

log = logging.getLogger(__name__)
CSV_NAME, MOSAIC_NAME = "explanations.csv", "mosaic.png"
HEADER = ["file", "label", "prob", "predicted", "overlay", "peak_y", "peak_x"]


def explain_files(
    explainer: Explainer,
    files: Sequence[str | Path],
    output: str | Path,
    target: int | str | None = None,
    batch_size: int = 32,
    mosaic: bool = True,
    scale: int = 4,
) -> list[dict]:
    """Write the overlays, ``explanations.csv`` and ``mosaic.png`` of ``files`` into
    ``output``; return the CSV's rows. Unreadable files are logged and skipped."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be an integer >= 1; e.g. 32.")
    out, spec = Path(output), explainer.spec
    rows: list[dict] = []
    shown: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, Path]] = []
    names: set[str] = set()
    paths = [Path(f) for f in files]
    for start in range(0, len(paths), batch_size):
        images, ok, bad = load_image_batch(
            paths[start : start + batch_size], spec.image_size, spec.num_channels, spec.resize_size
        )
        for path, reason in bad:
            log.warning("Skipped %s: %s", path, reason)
        if not ok:
            continue
        images = torch.from_numpy(images)
        found = explainer.explain(images, target)
        predicted = spec.decision.decide(found.probs, 1)[0]
        stems = [_unique(_safe(p.stem), names) for p in ok]
        for heat, i, k in zip(found.maps, found.image, found.label):
            name = f"{stems[i]}_{_safe(spec.classes[k])}.png"
            save_overlay(out / name, images[i], heat.numpy(), scale=scale)
            peak = divmod(int(heat.argmax()), heat.shape[1])
            rows.append(_row(ok[i], spec.classes, k, found.probs[i], predicted[i], name, peak))
        heats = found.first_per_image()
        shown += [(images[i], heats[i], found.probs[i], ok[i]) for i in range(len(ok))]
    if not rows:
        raise ValueError(f"None of the {len(paths)} input files is a readable image.")
    _write_csv(out / CSV_NAME, rows)
    if mosaic:
        _draw(explainer, shown, out / MOSAIC_NAME)
    log.info("Wrote %d heat maps of %d images to %s", len(rows), len(shown), out)
    return rows


def _row(path, classes, k, probs, predicted, name, peak) -> dict:
    return {
        "file": str(path),
        "label": classes[k],
        "prob": f"{float(probs[k]):.6f}",
        "predicted": ";".join(classes[j] for j in predicted),
        "overlay": name,
        "peak_y": peak[0],
        "peak_x": peak[1],
    }


def _write_csv(path: Path, rows: list[dict]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, HEADER)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def _draw(explainer: Explainer, shown: list, path: Path) -> None:
    from lightning_cls.figures.mosaic import draw_mosaic

    spec, task = explainer.spec, explainer.spec.decision
    images, heats, probs, files = zip(*shown)
    pred = task.predicted(torch.stack(probs))
    true = [task.labels.of_folder(p.parent.name, spec.classes) for p in files]
    known = all(t is not None for t in true)
    draw_mosaic(
        torch.stack(images),
        pred,
        list(spec.classes),
        path,
        true=torch.stack(true) if known else None,
        title=f"{explainer.method} heat maps at '{explainer.layer}'",
        heatmaps=torch.stack(heats),
    )


def _safe(name: str) -> str:
    """A file-name-safe version of a stem or class name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "image"


def _unique(stem: str, taken: set[str]) -> str:
    name, n = stem, 1
    while name in taken:
        n += 1
        name = f"{stem}-{n}"
    taken.add(name)
    return name
