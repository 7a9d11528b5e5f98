"""Multi-label training pieces: BCE with ``pos_weight``, and the epoch's outputs as a metric.

A multi-label network has one logit per label and is trained with binary cross-entropy on
multi-hot targets. ``pos_weight`` (per label) scales the loss of the positives: ``auto`` sets
it from the train split, negatives / positives per label (the value ``BCEWithLogitsLoss``'s
documentation suggests), capped at ``MAX_POS_WEIGHT``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

MAX_POS_WEIGHT = 100.0


class MultiLabelLoss(nn.Module):
    """``BCEWithLogitsLoss`` on multi-hot float targets; ``pos_weight`` is kept out of the state
    dict (it travels in the hyperparameters, like the class weights of ``WeightedCrossEntropy``)."""

    def __init__(self, pos_weight: Sequence[float] | None = None):
        super().__init__()
        weight = None if pos_weight is None else torch.tensor(pos_weight, dtype=torch.float32)
        self.register_buffer("pos_weight", weight, persistent=False)

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(
            logits.float(), target.float(), pos_weight=self.pos_weight
        )


def resolve_pos_weight(
    pos_weight: str | Sequence[float] | None, labels: torch.Tensor | None, num_labels: int
) -> list[float] | None:
    """``None``, a list of one weight per label, or ``"auto"`` (from the multi-hot train
    ``labels`` (N, K)): negatives / positives per label, capped at ``MAX_POS_WEIGHT``."""
    if pos_weight is None:
        return None
    if isinstance(pos_weight, str):
        if pos_weight != "auto":
            raise ValueError(
                f"loss.pos_weight={pos_weight!r} is not known; use auto (from the train "
                "labels), a list of one weight per label, or null."
            )
        if labels is None or labels.ndim != 2:
            raise ValueError(
                "loss.pos_weight=auto needs the multi-hot train labels of a multi-label "
                "DataModule (task=multilabel with data=multilabel)."
            )
        positives = labels.float().sum(0)
        negatives = len(labels) - positives
        weights = (negatives / positives.clamp(min=1)).clamp(max=MAX_POS_WEIGHT)
        return [round(float(w), 6) for w in weights]
    try:
        weights = [float(w) for w in pos_weight]
    except (TypeError, ValueError):
        raise ValueError(
            f"loss.pos_weight={pos_weight!r} is not a list of numbers; give one weight per "
            "label, auto or null."
        ) from None
    if len(weights) != num_labels or any(not w > 0 for w in weights):
        raise ValueError(
            f"loss.pos_weight has {len(weights)} values {weights}; give {num_labels} positive "
            "numbers, one per label (or auto)."
        )
    return weights


class EpochOutputs(Metric):
    """Every (probabilities, multi-hot targets) pair of an epoch, gathered over DDP ranks:
    ``compute()`` returns the two (N, K) tensors for the scores of
    ``lightning_cls.inference.scores`` (exact, no binning)."""

    full_state_update = False

    def __init__(self, num_labels: int):
        super().__init__()
        self.num_labels = num_labels
        self.add_state("probs", default=[], dist_reduce_fx="cat")
        self.add_state("targets", default=[], dist_reduce_fx="cat")

    def sync(self, *args, **kwargs):
        # A rank that saw no sample (an eval split shorter than the ranks; eval shards are not
        # padded) joins the gather with empty (0, K) tensors of the same dtypes: torchmetrics'
        # own placeholder for an empty list has another shape and dtype, and the gather aborts.
        if isinstance(self.probs, list) and not self.probs:
            self.probs.append(torch.empty(0, self.num_labels, device=self.device))
            self.targets.append(
                torch.empty(0, self.num_labels, dtype=torch.uint8, device=self.device)
            )
        return super().sync(*args, **kwargs)

    def update(self, probs: torch.Tensor, targets: torch.Tensor) -> None:
        self.probs.append(probs.detach().float())
        self.targets.append(targets.detach().to(torch.uint8))

    def compute(self) -> tuple[torch.Tensor, torch.Tensor]:
        # A list of batches on one process; one tensor after torchmetrics' DDP sync ("cat").
        if isinstance(self.probs, list) and not self.probs:
            return torch.empty(0, 0), torch.empty(0, 0)
        return dim_zero_cat(self.probs), dim_zero_cat(self.targets)
