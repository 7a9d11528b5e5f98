"""The learning half of a task: its base class, its registry and the one ``register_task``.

A task is one object (timm's ``timm/task/classification.py``): ``ClassificationModule`` holds
one (``module.task``), built from its ``task`` argument (``conf/task/<name>.yaml``: the name
and every option of that task), and asks it for the loss, the metrics of each stage and the
per-class report; it never branches on the task's name. Each learning task carries its
decision half (``task.decision``, a ``lightning_cls.inference.tasks`` object: probabilities,
labels, the threshold, the calibration), the part predict and serve use without Lightning.

A new task is one file and one registration::

    @register_task("my_task")          # also registers MyDecision under the same name
    class MyTask(TrainingTask):
        decision_class = MyDecision
        def __init__(self, num_classes, gamma: float = 2.0, **others):  # its own options
            super().__init__(num_classes, **others)
        def loss(self, logits, target): ...

``task={"name": "my_task", "gamma": 1.0}`` (or ``task=my_task task.gamma=1.0`` with a
``conf/task/my_task.yaml``) builds it. Options a task does not take reach
``TrainingTask.__init__``, which refuses them with a one-line error. ``config()`` is what every
checkpoint carries: the options given, what the task resolved while learning
(``pos_weight="auto"``, the threshold) and what calibration chose.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from lightning_cls.inference.tasks import TASKS as DECISIONS
from lightning_cls.inference.tasks import MultiClass, Task, create_task
from lightning_cls.registry import Registry
from lightning_cls.training.distill import softmax_distill_loss

TRAINING_TASKS = Registry("task", "lightning_cls.training_tasks")
STAGES = ("train", "val", "test")
TRUST = ("temperature", "reject", "conformal")  # what calibration chooses for the decision
# Keys of conf/task/<name>.yaml that are the trainer's (checkpointing, sweeps), not options.
TRAINER_KEYS = ("metric", "metric_tag")
# Until tasks held their options, checkpoints (and ClassificationModule's arguments, and the
# config keys label_smoothing, mixup.*, loss.*) kept the built-in tasks' options flat, beside the
# module's, with these defaults; calibration wrote its choices there too. Frozen: what old
# checkpoints hold. A new option lives only in its task's mapping.
FLAT_OPTIONS = {
    "label_smoothing": 0.0,
    "class_weights": None,
    "class_weight_method": "inverse",
    "threshold": None,
    "pos_weight": None,
    "mixup_alpha": 0.0,
    "cutmix_alpha": 0.0,
    "mix_prob": 1.0,
    "temperature": None,
    "reject": None,
    "conformal": None,
}


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


def task_config(
    task: str | Mapping[str, Any] | None, flat: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``task`` as one mapping, its ``name`` and options: a name alone, or a mapping (the keys
    of ``conf/task/<name>.yaml``; its ``metric``/``metric_tag`` are the trainer's and dropped).
    ``flat``: options given the way older code did (``FLAT_OPTIONS``: a checkpoint's flat
    hyperparameters, deprecated module arguments or config keys); those not at their old
    default join the mapping (set explicitly, they win over its values)."""
    config = {"name": task} if task is None or isinstance(task, str) else dict(task)
    config["name"] = config.get("name") or "multiclass"
    for key in TRAINER_KEYS:
        config.pop(key, None)
    unknown = sorted(set(flat or {}) - set(FLAT_OPTIONS))
    if unknown:
        raise TypeError(
            f"Unknown option(s) {', '.join(unknown)}; a task's options go in its mapping: "
            f"task={{'name': {config['name']!r}, {unknown[0]!r}: ...}}."
        )
    for key, value in (flat or {}).items():
        if value != FLAT_OPTIONS[key]:
            config[key] = value
    return config


def checkpoint_task(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The task mapping of a checkpoint's hyperparameters, in either layout (the task's
    mapping, or the older name plus flat options)."""
    flat = {k: hparams[k] for k in FLAT_OPTIONS if k in hparams}
    return task_config(hparams.get("task"), flat)


def warn_flat(
    options: Mapping[str, Any], where: str, category: type[Warning] = DeprecationWarning
) -> None:
    """A deprecation warning for options given flat (``where``: how they were given;
    ``category``: ``FutureWarning`` for users' config keys, shown by default)."""
    if options:
        names = ", ".join(sorted(options))
        warnings.warn(
            f"{where} {names}: deprecated, a task's options now live in its mapping "
            f"(task.{sorted(options)[0]}=...; conf/task/<name>.yaml).",
            category,
            stacklevel=3,
        )


def create_training_task(task: str | Mapping[str, Any], num_classes: int) -> TrainingTask:
    """The task ``task`` names (a name, or the mapping of its name and options) for
    ``num_classes`` outputs, built with its options."""
    config = task_config(task)
    name = config.pop("name")
    if name not in TRAINING_TASKS:
        raise TRAINING_TASKS.unknown(name, note=" (set task=<name>)")
    built = TRAINING_TASKS.get(name)(num_classes, **config)
    built.given = {k: v for k, v in config.items() if k not in TRUST and k != "threshold"}
    return built


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

    def __init__(
        self,
        num_classes: int,
        threshold: float | None = None,
        temperature: float | Sequence[float] | None = None,
        reject: Mapping[str, Any] | None = None,
        conformal: Mapping[str, Any] | None = None,
        **unused: Any,
    ):
        super().__init__()
        _refuse(self.name, unused)
        self.num_classes = num_classes
        self.given: dict[str, Any] = {}  # the options it was built with (create_training_task)
        trust = {"temperature": temperature, "reject": reject, "conformal": conformal}
        self.decide(threshold, **trust)

    def decide(self, threshold: float | None = None, **trust: Any) -> None:
        """Build the decision half (``lightning_cls.inference.tasks.create_task``: the one
        place it gets its threshold, temperature, rejection rule and prediction sets). Called
        where the task is built, by ``restore`` and by ``Calibrate`` with what it chose."""
        if trust.get("temperature") is None:
            trust["temperature"] = 1.0
        self.decision = create_task(self.name, threshold, **trust)

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

    def chosen(self) -> dict[str, Any]:
        """Options the task resolved while learning (``"auto"`` weights): they replace the
        given ones in ``config``."""
        return {}

    def config(self) -> dict[str, Any]:
        """The task as a checkpoint carries it (``module.hparams["task"]``): its name, the
        options it was built with (resolved), the threshold and what calibration chose. A
        task built from it (``create_training_task``) decides the same."""
        config = {"name": self.name, **self.given, **self.chosen()}
        if self.decision.threshold is not None:
            config["threshold"] = self.decision.threshold
        trust = {k: v for k, v in self.decision.trust().items() if v not in (None, 1.0)}
        return {**config, **trust}

    def restore(self, config: Mapping[str, Any]) -> None:
        """Take back the decision a checkpoint being loaded carries (``config``): its
        calibration, and the threshold chosen with its weights (``restored_threshold``)."""
        trust = {k: config.get(k) for k in TRUST}
        self.decide(self.restored_threshold(config), **trust)

    def restored_threshold(self, config: Mapping[str, Any]) -> float | None:
        """The threshold to decide with after loading ``config``: here the current one."""
        return self.decision.threshold

    def test_figures(
        self, tensors: Mapping[str, torch.Tensor], classes: list[str]
    ) -> dict[str, Callable[[Path], Any]]:
        """File name -> a function drawing it there, from the test epoch's ``epoch_tensors``
        (``TrainingPlots`` asks after testing). Here none."""
        return {}

    @classmethod
    def balance_advice(cls, counts: Sequence[int], classes: Sequence[str]) -> dict[str, Any]:
        """What makes up for imbalanced train ``counts`` (the doctor's advice): settings, and
        the weights they will use. Here none."""
        return {"suggest": []}

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
