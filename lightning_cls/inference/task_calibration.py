"""A task's calibration maths, handed out as ``task.calibration``: how many temperatures it
fits, the NLL they minimise, the (confidence, correct) pairs of its reliability diagram, its
ECE, the decision threshold chosen on validation, and which calibration settings it takes.

``training/calibration.py`` (``python -m lightning_cls.calibrate``, ``calibrate=true``) and
``inference/decision.py`` (an artifact's spec on load) ask this object; neither branches on
the task. Torch and torchmetrics are imported by the methods that need them: predict and serve
build the decision (and this object) without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning_cls.inference.conformal import check_conformal, refuse_multilabel
from lightning_cls.inference.trust import check_temperature

if TYPE_CHECKING:
    import torch


class SoftmaxCalibration:
    """One label per image: one temperature for the softmax over all classes, cross-entropy,
    the top-1 confidence, no threshold; prediction sets allowed."""

    per_label = False  # one temperature per label, and no prediction sets

    def temperatures(self, num_classes: int) -> int:
        """How many temperatures calibration fits: one, for the softmax over all classes."""
        return 1

    def check_temperature(self, value: Any, num_classes: int) -> float | tuple[float, ...]:
        """``value`` checked as this task's temperature (``trust.check_temperature``)."""
        return check_temperature(value, num_classes, self.per_label)

    def check_conformal(self, value: Any) -> dict[str, Any] | None:
        """A fitted prediction-set rule checked for this task (``conformal.check_conformal``)."""
        return check_conformal(value, self.per_label)

    def refuse_sets(self) -> None:
        """A ``ValueError`` when this task has no prediction sets (before fitting them)."""
        refuse_multilabel(self.per_label)

    def nll(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The negative log-likelihood of ``labels`` given (scaled) ``logits``: cross-entropy."""
        import torch.nn.functional as F

        return F.cross_entropy(logits.float(), labels.long())

    def reliability(self, probs: torch.Tensor, labels: torch.Tensor):
        """(confidence, correct) pairs of a reliability diagram: the top-1 probability and
        whether the top-1 class is the label, per image."""
        confidence, predicted = probs.max(1)
        return confidence, (predicted == labels).float()

    def calibration_error(self, probs: torch.Tensor, labels: torch.Tensor, bins: int) -> float:
        """ECE (torchmetrics, ``bins`` equal-width bins, L1) of the top-1 confidence."""
        from torchmetrics.functional.classification import multiclass_calibration_error

        probs = probs.detach().float()
        return multiclass_calibration_error(
            probs, labels.long(), probs.shape[1], n_bins=bins
        ).item()

    def choose_threshold(self, probs: torch.Tensor, labels: torch.Tensor) -> float | None:
        """The decision threshold best on (validation) ``probs``; None: no threshold."""
        return None


class SigmoidCalibration(SoftmaxCalibration):
    """Any number of labels per image: one temperature per label (each has its own sigmoid and
    over-confidence), binary cross-entropy and ECE over every (image, label), the threshold of
    maximal micro-F1; no prediction sets (each label is already its own yes/no)."""

    per_label = True

    def temperatures(self, num_classes: int) -> int:
        return num_classes

    def nll(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The mean binary cross-entropy over every (image, label)."""
        import torch.nn.functional as F

        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())

    def reliability(self, probs: torch.Tensor, labels: torch.Tensor):
        """Every (image, label) probability against whether the label is true."""
        return probs.flatten(), labels.round().flatten().float()

    def calibration_error(self, probs: torch.Tensor, labels: torch.Tensor, bins: int) -> float:
        """The binary ECE over every (image, label) probability."""
        from torchmetrics.functional.classification import binary_calibration_error

        flat = labels.round().int().flatten()
        return binary_calibration_error(probs.detach().float().flatten(), flat, n_bins=bins).item()

    def choose_threshold(self, probs: torch.Tensor, labels: torch.Tensor) -> float | None:
        """The threshold of maximal micro-F1 (``inference.scores.best_threshold``)."""
        from lightning_cls.inference.scores import best_threshold

        return best_threshold(probs, labels)
