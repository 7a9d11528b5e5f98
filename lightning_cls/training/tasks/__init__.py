"""Tasks, learning half: the loss, the metrics, and what the task chooses while it learns.

A task is one object (timm's ``timm/task/classification.py``): ``ClassificationModule`` holds
one (``module.task``), built from its ``task`` hyperparameter, and asks it for the loss, the
metrics of each stage and the per-class report; it never branches on the task's name. Each
learning task carries its decision half (``task.decision``, a ``lightning_cls.inference.tasks``
object: probabilities, labels, the threshold), the part predict and serve use without Lightning.

A new task is one file and one registration::

    @register_task("my_task")          # also registers MyDecision under the same name
    class MyTask(TrainingTask):
        decision_class = MyDecision
        def loss(self, logits, target): ...

Options: the module hands a task the loss/task options the user set (``label_smoothing``,
``class_weights``, ``threshold``, ``pos_weight``, MixUp/CutMix ...); a task takes the ones it
understands as keyword arguments and passes the rest to ``TrainingTask.__init__``, which
refuses them with a one-line error (an option that does nothing is never silently ignored).
Whatever a task decides while it learns (``pos_weight="auto"``, the threshold) is what
``saved_hparams`` returns: the module's ``hparams`` (and so every checkpoint) carry it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import nn

from lightning_cls.inference.tasks import TASKS as DECISIONS
from lightning_cls.inference.tasks import MultiClass, Task
from lightning_cls.registry import Registry
from lightning_cls.training.distill import softmax_distill_loss

TRAINING_TASKS = Registry("task", "lightning_cls.training_tasks")
STAGES = ("train", "val", "test")


def register_task(name: str):
    """Decorator: register a ``TrainingTask`` subclass as ``name`` (``task=name``), and its
    ``decision_class`` under the same name for predict and serve."""

    def decorator(cls: type[TrainingTask]) -> type[TrainingTask]:
        if not (isinstance(cls, type) and issubclass(cls, TrainingTask)):
            raise TypeError(f"Task '{name}': register a TrainingTask subclass, not {cls!r}.")
        DECISIONS.register(name)(cls.decision_class)
        TRAINING_TASKS.register(name)(cls)
        return cls

    return decorator


def create_training_task(name: str, num_classes: int, **options: Any) -> TrainingTask:
    """The task registered as ``name`` for ``num_classes`` outputs, with the options set."""
    if name not in TRAINING_TASKS:
        raise TRAINING_TASKS.unknown(name, note=" (set task=<name>)")
    return TRAINING_TASKS.get(name)(num_classes, **options)


class TrainingTask(nn.Module):
    """The learning half of a task. The defaults keep nothing per epoch and log nothing but
    the loss; subclasses add their metrics. An ``nn.Module``: its metrics and loss buffers
    follow the module to its device."""

    decision_class: ClassVar[type[Task]] = MultiClass
    # The labels the data must have: a DataModule's ``task`` ("multiclass": one class index per
    # image, "multilabel": multi-hot rows), and what to tell the user when it has others.
    data_task: ClassVar[str] = "multiclass"
    data_hint: ClassVar[str] = (
        "it has several labels per image; set task=multilabel (or a task for multi-hot labels)."
    )

    def __init__(self, num_classes: int, threshold: float | None = None, **unused: Any):
        super().__init__()
        _refuse(self.name, unused)
        self.num_classes = num_classes
        self.decision = self.decision_class(threshold=threshold)

    @property
    def name(self) -> str:
        return self.decision_class.name

    # -- data ----------------------------------------------------------------------------------
    def check_data(self, data_task: str, data_name: str) -> None:
        """A ``ValueError`` when the DataModule's labels are not this task's."""
        if data_task != self.data_task:
            raise ValueError(
                f"task={self.name} but the data ({data_name}) is {data_task}: {self.data_hint}"
            )

    def setup(self, train_labels: torch.Tensor | None) -> None:
        """Options computed from the train split's labels (``"auto"`` weights)."""

    def saved_hparams(self) -> dict[str, Any]:
        """What the task chose that checkpoints must carry (merged into ``module.hparams``)."""
        return {}

    def restore(self, hparams: Mapping[str, Any]) -> None:
        """Take back what ``saved_hparams`` wrote, from a checkpoint being loaded."""

    # -- learning ------------------------------------------------------------------------------
    def training_batch(self, batch):
        """The batch ``training_step`` learns from (MixUp/CutMix may mix it)."""
        return batch

    def loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must define loss(logits, target).")

    def distill_loss(
        self, logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float
    ) -> torch.Tensor:
        """The soft-target term of knowledge distillation (``training/distill.py``): here
        KL of the softmax outputs softened by ``temperature``, times its square."""
        return softmax_distill_loss(logits, teacher_logits, temperature)

    def update(self, stage: str, logits: torch.Tensor, target: torch.Tensor) -> None:
        """Count one batch of ``stage`` ("train", "val", "test") in the epoch's metrics."""

    def step_metrics(self, stage: str) -> Mapping[str, Any]:
        """Metric objects Lightning logs, syncs and resets per epoch for ``stage``."""
        return {}

    def reset(self, stage: str) -> None:
        """Forget the epoch state of ``stage`` (called as a val/test epoch starts)."""

    def epoch_end(self, stage: str, tensors: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        """The epoch's metrics to log at its end, from ``epoch_tensors(stage)``."""
        return {}

    def epoch_tensors(self, stage: str) -> dict[str, torch.Tensor]:
        """The val/test epoch's tensors that per-class results are computed from."""
        return {}

    def per_class(
        self, stage: str, tensors: Mapping[str, torch.Tensor], classes: list[str], logged: Mapping
    ) -> dict[str, dict]:
        """Per class of the last ``stage`` epoch, from its ``epoch_tensors``: what
        ``results.json`` keeps (``logged``: the trainer's metrics of that epoch)."""
        return {}


def _refuse(task: str, options: Mapping[str, Any]) -> None:
    if options:
        names = ", ".join(f"{k}={v!r}" for k, v in sorted(options.items()))
        raise ValueError(f"{names}: no meaning for task={task}; leave them unset.")


# The built-in tasks register themselves, as a plug-in's would.
from lightning_cls.training.tasks import multiclass, multilabel  # noqa: E402, F401
