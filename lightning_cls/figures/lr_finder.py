"""The LR finder's picture (``callbacks.lr_finder.LRFinderPlot``): Lightning draws it (loss
against learning rate, the suggestion marked); it is written here like every other figure."""

from __future__ import annotations

from pathlib import Path

from lightning_cls.fileio import atomic_savefig


def save_lr_finder_plot(finder, path: Path) -> Path:
    """``finder`` (Lightning's ``_LRFinder``, after a search) plotted with its suggestion, on
    the Agg backend, written atomically to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    return atomic_savefig(finder.plot(suggest=True), path, dpi=100)
