"""The sweep summary's picture (``python -m lightning_cls.summarize``): each trial's objective
against each swept parameter, one panel each."""

from __future__ import annotations

import math
from pathlib import Path

from lightning_cls.fileio import atomic_savefig


def plot_sweep(rows: list[dict], swept: list[str], path: Path) -> None:
    """The objective against each swept parameter, one panel each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if r["objective"] is not None]
    fig, axes = plt.subplots(
        1, max(1, len(swept)), figsize=(4 * max(1, len(swept)), 3.2), squeeze=False
    )
    for ax, key in zip(axes[0], swept or ["job"]):
        raw = [r["params"].get(key, "") if key != "job" else r["job"] for r in done]
        numbers = [_number(v) for v in raw]
        if all(n is not None for n in numbers) and numbers:
            ax.scatter(numbers, [r["objective"] for r in done])
            if min(numbers) > 0 and max(numbers) / min(numbers) > 20:
                ax.set_xscale("log")
        else:  # categorical: one position per value
            labels = sorted({str(v) for v in raw})
            ax.scatter([labels.index(str(v)) for v in raw], [r["objective"] for r in done])
            ax.set_xticks(range(len(labels)), labels)
        ax.set_xlabel(key)
        ax.set_ylabel("objective")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=100)
    plt.close(fig)


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
