"""Tasks, learning half (``base.py``: ``TrainingTask``, ``register_task``,
``create_training_task``), and the built-in tasks, which register themselves as a plug-in's
would: ``multiclass.py``, ``multilabel.py``."""

from lightning_cls.training.tasks import multiclass, multilabel  # noqa: F401  (registers them)
from lightning_cls.training.tasks.base import (
    STAGES,
    TRAINING_TASKS,
    TrainingTask,
    checkpoint_task,
    create_training_task,
    register_task,
    task_config,
)

__all__ = [
    "STAGES",
    "TRAINING_TASKS",
    "TrainingTask",
    "checkpoint_task",
    "create_training_task",
    "register_task",
    "task_config",
]
