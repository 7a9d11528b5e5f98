"""``task=multiclass`` (the default): cross-entropy (label smoothing, class weights, MixUp/CutMix,
LogitNorm), top-1/top-5 accuracy, and a confusion matrix per val/test epoch for per-class
results.

``logit_norm=tau`` (> 0) trains with LogitNorm (Wei et al., ICML 2022): the cross-entropy is
taken on ``logits / (tau * ||logits||)``, so the network cannot lower the loss by growing the
logits' norm, the over-confidence that makes an unknown image score as familiar as a known one.
Only the loss changes: the network, its exported files and predict still give the raw logits,
whose scale the calibrated temperature sets."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import torch
from torch import nn
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from lightning_cls.inference.tasks import MultiClass
from lightning_cls.training.class_balance import (
    WeightedCrossEntropy,
    class_weights,
    per_class_metrics,
    resolve_class_weights,
)
from lightning_cls.training.mixup import BatchMixer
from lightning_cls.training.tasks.base import STAGES, TrainingTask, register_task

log = logging.getLogger(__name__)


@register_task("multiclass")
class MultiClassTraining(TrainingTask):
    decision_class = MultiClass

    def __init__(
        self,
        num_classes: int,
        label_smoothing: float = 0.0,
        class_weights: str | Sequence[float] | None = None,  # "auto": from the train counts
        class_weight_method: str = "inverse",  # or "effective" (training/class_balance.py)
        mixup_alpha: float = 0.0,
        cutmix_alpha: float = 0.0,
        mix_prob: float = 1.0,
        logit_norm: float = 0.0,  # LogitNorm's temperature tau; 0: off (module docstring)
        **others: Any,
    ):
        if others.get("pos_weight") is not None or others.get("threshold") is not None:
            raise ValueError(
                "task.pos_weight and task.threshold apply to multi-label models; set "
                "task=multilabel (a multi-label dataset) or leave them null."
            )
        others.pop("pos_weight", None)
        others.pop("threshold", None)
        super().__init__(num_classes, **others)
        if not isinstance(label_smoothing, (int, float)) or not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(
                f"task.label_smoothing={label_smoothing!r} is not a probability; set "
                "task.label_smoothing to a number from 0.0 (off) to 1.0, e.g. 0.1."
            )
        if (
            isinstance(logit_norm, bool)
            or not isinstance(logit_norm, (int, float))
            or not (0.0 <= logit_norm <= 10.0)
        ):
            raise ValueError(
                f"task.logit_norm={logit_norm!r} is not a LogitNorm temperature; set a number "
                "above 0 and at most 10 (0.04 is Wei et al.'s for CIFAR-10), or 0 to train "
                "without it."
            )
        self.label_smoothing, self.class_weight_method = label_smoothing, class_weight_method
        self.logit_norm = float(logit_norm)
        self.class_weights = class_weights
        self.criterion: nn.Module = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
        if class_weights is not None and class_weights != "auto":  # "auto": in setup()
            self._weigh(resolve_class_weights(class_weights, None, num_classes))
        # Keyed "<stage>_metrics": a ModuleDict key may not be "train" (nn.Module.train). Train
        # accuracy is updated every step: one metric counts top-1 and top-5 in one pass.
        self.metrics = nn.ModuleDict(
            {f"{s}_metrics": _accuracy(num_classes, s) for s in STAGES if s != "train"}
        )
        self.metrics["train_metrics"] = TopKHits(num_classes, prefix="train/")
        # Predictions per (true, predicted) class of the last val and test epochs: per-class
        # precision/recall in results.json; TrainingPlots draws the test one.
        self.confusion = nn.ModuleDict(
            {stage: MulticlassConfusionMatrix(num_classes) for stage in ("val", "test")}
        )
        self.mixer = None
        if mixup_alpha or cutmix_alpha:
            self.mixer = BatchMixer(num_classes, mixup_alpha, cutmix_alpha, mix_prob)

    def _weigh(self, weights: list[float]) -> None:
        self.class_weights = weights
        self.criterion = WeightedCrossEntropy(weights, self.label_smoothing)

    def setup(self, train_labels: torch.Tensor | None) -> None:
        if self.class_weights == "auto":
            method = self.class_weight_method
            self._weigh(resolve_class_weights("auto", train_labels, self.num_classes, method))

    def chosen(self) -> dict[str, Any]:
        resolved = self.class_weights not in (None, "auto")
        return {"class_weights": self.class_weights} if resolved else {}

    @classmethod
    def balance_advice(cls, counts: Sequence[int], classes: Sequence[str]) -> dict[str, Any]:
        """The inverse-frequency weights ``task.class_weights=auto`` will use, or a sampler."""
        weights = class_weights(torch.as_tensor(list(counts)), "inverse")
        return {
            "class_weights": dict(zip(classes, (round(w, 4) for w in weights))),
            "suggest": ["task.class_weights=auto", "data.balanced_sampler=true"],
        }

    def training_batch(self, batch):
        return self.mixer(*batch) if self.mixer is not None else batch  # soft (B, K) targets

    def loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self.logit_norm:
            norms = torch.linalg.vector_norm(logits.float(), dim=1, keepdim=True)
            logits = logits / (norms.to(logits.dtype) + 1e-7) / self.logit_norm
        return self.criterion(logits, target)

    def update(self, stage: str, logits: torch.Tensor, target: torch.Tensor) -> None:
        self.metrics[f"{stage}_metrics"].update(
            logits, target if target.ndim == 1 else target.argmax(1)
        )
        if stage != "train":
            self.confusion[stage].update(logits, target)

    def step_metrics(self, stage: str) -> Mapping[str, Any]:
        # Train accuracy is computed once per epoch (epoch_end): a per-step log costs ~10%.
        return self.metrics[f"{stage}_metrics"] if stage != "train" else {}

    def reset(self, stage: str) -> None:
        self.confusion[stage].reset()

    def epoch_end(self, stage: str, tensors: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        if stage != "train":
            return {}
        values = self.metrics["train_metrics"].compute()
        self.metrics["train_metrics"].reset()
        return values

    def epoch_tensors(self, stage: str) -> dict[str, torch.Tensor]:
        return {"confusion": self.confusion[stage].compute()}

    def per_class(self, stage: str, tensors, classes: list[str], logged: Mapping) -> dict:
        return per_class_metrics(tensors["confusion"].cpu(), classes)

    def test_figures(self, tensors, classes: list[str]) -> dict[str, Any]:
        """The confusion matrix and per-class accuracy bars (and the table in the log)."""
        from lightning_cls.figures import plots

        matrix = tensors["confusion"].cpu()  # (K, K)
        classes = classes or [str(i) for i in range(matrix.shape[0])]

        def confusion(path):
            plots.plot_confusion(matrix, classes, path)
            log.info("Per-class test accuracy:\n%s", plots.per_class_table(matrix, classes))

        return {
            "confusion_matrix.png": confusion,
            "per_class_accuracy.png": partial(plots.plot_per_class_accuracy, matrix, classes),
        }


class TopKHits(Metric):
    """Top-1 (and top-5, above 5 classes) micro accuracy counted in one pass per batch:
    ``{prefix}acc`` and ``{prefix}acc_top5``, the values of ``MulticlassAccuracy(average="micro",
    top_k=k)`` (hits / images, integer counts summed over DDP ranks), at the per-step cost of one
    ``topk`` and no argument checks (the loss has already refused labels out of range). A
    ``MetricCollection`` of the two accuracies cost twice its update on short training steps
    (``benchmarks/step_overhead.py``)."""

    full_state_update = False

    def __init__(self, num_classes: int, prefix: str = ""):
        super().__init__()
        self.ks = (1, 5) if num_classes > 5 else (1,)
        self.prefix = prefix
        self.add_state("hits", torch.zeros(len(self.ks), dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("total", torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def update(self, logits: torch.Tensor, target: torch.Tensor) -> None:
        top = logits.topk(self.ks[-1], dim=1).indices  # (B, k)
        found = (top == target[:, None]).cumsum(1)  # (B, k): label among the first j + 1
        self.hits += found[:, [k - 1 for k in self.ks]].sum(0)
        self.total += target.shape[0]

    def compute(self) -> dict[str, torch.Tensor]:
        rates = self.hits.float() / self.total.float()
        names = [f"{self.prefix}acc", f"{self.prefix}acc_top5"]
        return dict(zip(names, rates))


def _accuracy(num_classes: int, stage: str) -> MetricCollection:
    metrics = {"acc": MulticlassAccuracy(num_classes, top_k=1, average="micro")}
    if num_classes > 5:
        metrics["acc_top5"] = MulticlassAccuracy(num_classes, top_k=5, average="micro")
    return MetricCollection(metrics, prefix=f"{stage}/")
