"""``task=multilabel``: BCE with ``pos_weight``, mAP/AUROC/F1, and the threshold chosen on val.

A multi-label network has one logit per label and is trained with binary cross-entropy on
multi-hot targets. ``pos_weight`` (per label) scales the loss of the positives: ``auto`` sets
it from the train split, negatives / positives per label (the value ``BCEWithLogitsLoss``'s
documentation suggests), capped at ``MAX_POS_WEIGHT``.

The decision threshold (what predict and the server use) has one owner, this task's decision
half (``task.decision.threshold``): fixed when the user gives ``threshold``, else chosen by
``epoch_end`` on each validation (max micro-F1) and taken back from a checkpoint that is
loaded (``restore``), so ``test`` on the best checkpoint uses the one chosen with its weights.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from lightning_cls.inference.scores import multilabel_report, per_label_report
from lightning_cls.inference.tasks import MultiLabel
from lightning_cls.training.distill import sigmoid_distill_loss
from lightning_cls.training.tasks.base import TrainingTask, register_task

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
                f"task.pos_weight={pos_weight!r} is not known; use auto (from the train "
                "labels), a list of one weight per label, or null."
            )
        if labels is None or labels.ndim != 2:
            raise ValueError(
                "task.pos_weight=auto needs the multi-hot train labels of a multi-label "
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
            f"task.pos_weight={pos_weight!r} is not a list of numbers; give one weight per "
            "label, auto or null."
        ) from None
    if len(weights) != num_labels or any(not w > 0 for w in weights):
        raise ValueError(
            f"task.pos_weight has {len(weights)} values {weights}; give {num_labels} positive "
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


@register_task("multilabel")
class MultiLabelTraining(TrainingTask):
    decision_class = MultiLabel
    data_task = "multilabel"
    data_hint = (
        "it has one label per image; for several labels per image use data=multilabel (a "
        "CSV/JSON index of file,label1;label2)."
    )

    def __init__(
        self,
        num_classes: int,
        threshold: float | str | None = None,  # None/"auto": chosen on each validation
        pos_weight: str | Sequence[float] | None = None,  # "auto": from the train counts
        **others: Any,
    ):
        _refuse_multiclass_options(others)
        self.choose_threshold = threshold is None or threshold == "auto"
        threshold = None if self.choose_threshold else threshold
        super().__init__(num_classes, threshold=threshold, **others)
        self.pos_weight = pos_weight
        weights = None if pos_weight == "auto" else pos_weight  # "auto": in setup()
        self.criterion = MultiLabelLoss(resolve_pos_weight(weights, None, num_classes))
        # Each val/test epoch's sigmoid outputs and targets (gathered over ranks).
        self.outputs = nn.ModuleDict({s: EpochOutputs(num_classes) for s in ("val", "test")})

    def setup(self, train_labels: torch.Tensor | None) -> None:
        if self.pos_weight == "auto":
            self.pos_weight = resolve_pos_weight("auto", train_labels, self.num_classes)
            self.criterion = MultiLabelLoss(self.pos_weight)

    def chosen(self) -> dict[str, Any]:
        return {"pos_weight": self.pos_weight} if self.pos_weight not in (None, "auto") else {}

    def restored_threshold(self, config: Mapping[str, Any]) -> float | None:
        """A checkpoint's threshold is the one chosen with its weights (a threshold the user
        fixed stays fixed)."""
        saved = config.get("threshold")
        if self.choose_threshold and saved is not None:
            return float(saved)
        return self.decision.threshold

    @classmethod
    def balance_advice(cls, counts: Sequence[int], classes: Sequence[str]) -> dict[str, Any]:
        """The loss weighs each label's positives (counts: positives per label)."""
        return {"suggest": ["task.pos_weight=auto"]}

    def loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.criterion(logits, target)

    def distill_loss(self, logits, teacher_logits, temperature: float) -> torch.Tensor:
        """One sigmoid per label: BCE against the teacher's softened probabilities."""
        return sigmoid_distill_loss(logits, teacher_logits, temperature)

    def update(self, stage: str, logits: torch.Tensor, target: torch.Tensor) -> None:
        if stage != "train":
            self.outputs[stage].update(self.decision.probabilities(logits), target)

    def reset(self, stage: str) -> None:
        self.outputs[stage].reset()

    def epoch_tensors(self, stage: str) -> dict[str, torch.Tensor]:
        probs, targets = self.outputs[stage].compute()  # every rank: the gathered epoch
        return {"probs": probs, "targets": targets} if len(probs) else {}

    def epoch_end(self, stage: str, tensors: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        """mAP, AUROC and F1 of the epoch's gathered (N, K) outputs; on val, first the
        threshold is chosen (unless fixed). Test never chooses one."""
        if stage == "train" or not tensors:
            return {}
        probs, targets = tensors["probs"], tensors["targets"]
        if stage == "val" and self.choose_threshold:
            self.decision.threshold = self.decision.calibration.choose_threshold(probs, targets)
        report = multilabel_report(probs, targets, self.decision.threshold)
        logged = {f"{stage}/{k}": v for k, v in report.items()}
        return {**logged, f"{stage}/threshold": self.decision.threshold}

    def per_class(self, stage: str, tensors, classes: list[str], logged: Mapping) -> dict:
        """Per label, at the threshold logged with those outputs: the tested checkpoint's,
        also after a spawned DDP test (whose processes held their own copies of this task)."""
        if not tensors:
            return {}
        threshold = float(logged.get(f"{stage}/threshold", self.decision.threshold))
        return per_label_report(tensors["probs"], tensors["targets"], threshold, classes)

    def test_figures(self, tensors, classes: list[str]) -> dict[str, Any]:
        """Average precision, AUROC and F1 per label (``per_label_scores.png``)."""
        from lightning_cls.figures.plots import plot_per_label

        per_label = self.per_class("test", tensors, classes, {})
        return {"per_label_scores.png": partial(plot_per_label, per_label)} if per_label else {}


def _refuse_multiclass_options(options: Mapping[str, Any]) -> None:
    """The multi-class options with no multi-label meaning are one-line errors."""
    if options.get("label_smoothing"):
        raise ValueError(
            f"label_smoothing={options['label_smoothing']} applies to multi-class softmax "
            "targets; task=multilabel has no label_smoothing."
        )
    if options.get("class_weights") is not None:
        raise ValueError(
            "class_weights weighs the classes of a softmax; with task=multilabel use "
            "task.pos_weight (auto, or one weight per label)."
        )
    if options.get("mixup_alpha") or options.get("cutmix_alpha"):
        raise ValueError(
            "MixUp/CutMix (mixup_alpha/cutmix_alpha) mix one-hot targets; task=multilabel "
            "has neither."
        )
