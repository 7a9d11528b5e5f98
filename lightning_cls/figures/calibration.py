"""The reliability diagram of ``python -m lightning_cls.calibrate diagram=...`` (and
``calibrate=true``): accuracy against confidence per bin, before and after calibration, as the
task's calibration object (``task.calibration``) pairs them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lightning_cls.fileio import atomic_savefig

if TYPE_CHECKING:
    import torch

    from lightning_cls.inference.task_calibration import SoftmaxCalibration


def reliability_diagram(
    before: torch.Tensor,
    after: torch.Tensor,
    labels: torch.Tensor,
    calibration: SoftmaxCalibration,
    path: str | Path,
    bins: int = 15,
) -> Path:
    """Accuracy against confidence in ``bins`` equal-width bins, before and after calibration,
    with the diagonal a calibrated model follows; the task's ``calibration`` (``task.
    calibration``) gives the (confidence, correct) pairs and the ECE. Written atomically
    (``fileio.atomic_savefig``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="calibrated")
    for probs, name in ((before, "before"), (after, "after")):
        confidence, correct = calibration.reliability(probs, labels)
        ece = calibration.calibration_error(probs, labels, bins)
        centres, accuracy = _bins(confidence, correct, bins)
        ax.plot(centres, accuracy, marker="o", label=f"{name} (ECE {ece:.3f})")
    ax.set(xlabel="confidence", ylabel="accuracy", xlim=(0, 1), ylim=(0, 1))
    ax.set_title("Reliability (validation)")
    ax.legend(loc="upper left")
    fig.tight_layout()
    try:
        return atomic_savefig(fig, path, dpi=100)
    finally:
        plt.close(fig)


def _bins(confidence: torch.Tensor, correct: torch.Tensor, bins: int) -> tuple[list, list]:
    index = (confidence * bins).long().clamp(max=bins - 1)
    centres, accuracy = [], []
    for b in range(bins):
        members = index == b
        if members.any():
            centres.append(confidence[members].mean().item())
            accuracy.append(correct[members].mean().item())
    return centres, accuracy
