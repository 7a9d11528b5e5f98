"""A task's labels, handed out as ``task.labels``: what a label is (a class index, or a
multi-hot row), how predicted names and an ImageFolder folder become one, the count per class,
the shape check, and the per-class errors a prediction mosaic shows beside its tiles.

The mosaic (``figures/mosaic.py``), the doctor, ``explain`` and ``Predictor.accuracy`` ask this
object; none reads how the task stores its labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# The mosaic's side panel: (values per class, support per class, (bars' title, axis name),
# heading of the lines, lines).
Panel = tuple[list[float], "torch.Tensor", tuple[str, str], str, list[str]]


def confusion(true: torch.Tensor, pred: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(K, K) int64 counts, rows true class, columns predicted."""
    import torch

    index = true.long() * num_classes + pred.long()
    return torch.bincount(index, minlength=num_classes**2).view(num_classes, num_classes)


def most_confused(
    matrix: torch.Tensor, classes: Sequence[str], top: int = 5
) -> list[tuple[str, str, int]]:
    """The ``top`` (true, predicted, count) off-diagonal cells, largest first."""
    off = matrix.clone()
    off.fill_diagonal_(0)
    counts, cells = off.flatten().sort(descending=True)
    k = matrix.shape[0]
    return [
        (classes[c // k], classes[c % k], n)
        for n, c in zip(counts.tolist()[:top], cells.tolist()[:top])
        if n > 0
    ]


class ClassLabels:
    """One class index per image: (N,) labels."""

    multi_hot = False
    # Each image gets exactly one class: an exporter may write a classifier with class labels
    # (Core ML's ``ClassifierConfig``); a multi-label model's outputs are per-label scores.
    exclusive = True

    def __init__(self, task_name: str):
        self.task_name = task_name  # named in errors

    def encode(self, names: Sequence[str], classes: Sequence[str]) -> torch.Tensor:
        """Predicted class names (most probable first) -> the label tensor of one image."""
        import torch

        return torch.tensor(list(classes).index(names[0]))

    def of_folder(self, folder: str, classes: Sequence[str]) -> torch.Tensor | None:
        """The true label of a file in an ImageFolder layout (its parent folder's name), or
        None when the folder says nothing."""
        import torch

        return torch.tensor(list(classes).index(folder)) if folder in classes else None

    def counts(self, labels: torch.Tensor, num_classes: int) -> list[int]:
        """Images per class (the doctor's class balance)."""
        import torch

        return torch.bincount(labels.long(), minlength=num_classes)[:num_classes].tolist()

    def check(self, labels: torch.Tensor, source: str) -> None:
        """A ``ValueError`` when ``labels`` have another shape than this task's."""
        if (labels.ndim == 2) != self.multi_hot:
            want = (
                "give multi-hot (N, labels) rows: data=multilabel."
                if self.multi_hot
                else "give one class index per image: a single-label dataset."
            )
            raise ValueError(
                f"{source} is a {self.task_name} model but the labels have shape "
                f"{tuple(labels.shape)}; {want}"
            )

    def errors(self, true: torch.Tensor, pred: torch.Tensor, classes: Sequence[str]) -> Panel:
        """The prediction mosaic's side panel: per-class accuracy and the most confused
        pairs."""
        matrix = confusion(true, pred, len(classes))
        support = matrix.sum(1)
        values = (matrix.diag().double() / support.clamp(min=1)).tolist()
        lines = [f"{t} → {p}: {n}" for t, p, n in most_confused(matrix, classes)]
        names = ("per-class accuracy", "accuracy")
        return values, support, names, "most confused (true → pred)", lines or ["no confusions"]


class MultiHotLabels(ClassLabels):
    """Any number of labels per image: (N, K) multi-hot rows."""

    multi_hot = True
    exclusive = False

    def encode(self, names: Sequence[str], classes: Sequence[str]) -> torch.Tensor:
        import torch

        hot = torch.zeros(len(classes), dtype=torch.bool)
        hot[[list(classes).index(n) for n in names]] = True
        return hot

    def of_folder(self, folder: str, classes: Sequence[str]) -> torch.Tensor | None:
        return None  # a folder names at most one label

    def counts(self, labels: torch.Tensor, num_classes: int) -> list[int]:
        """Positives per label."""
        return labels.sum(0).round().long().tolist()

    def errors(self, true: torch.Tensor, pred: torch.Tensor, classes: Sequence[str]) -> Panel:
        """Per-label recall and the labels most often missed or falsely predicted."""
        true, pred = true.bool(), pred.bool()
        support = true.sum(0)
        values = ((true & pred).sum(0).double() / support.clamp(min=1)).tolist()
        missed = (true & ~pred).sum(0).tolist()
        false = (~true & pred).sum(0).tolist()
        worst = sorted(range(len(classes)), key=lambda i: -(missed[i] + false[i]))[:5]
        lines = [f"{classes[i]}: {missed[i]} missed, {false[i]} false" for i in worst]
        names = ("per-label recall", "recall")
        return values, support, names, "most wrong labels", lines or ["none"]
