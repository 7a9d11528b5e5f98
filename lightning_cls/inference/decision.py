"""What an artifact's answers mean: the task and its trust settings, checked into one ``Task``.

``InputSpec`` (``spec.py``) is the input contract: what a model is fed. It also carries how
its outputs are decided, and this module turns those fields into the decision object: the task
by name (``tasks.py``: multi-class, multi-label and its threshold), the temperature and the
rejection rule (``trust.py``) and the prediction-set rule (``conformal.py``), each checked
here. A bad value is a ``DecisionError`` naming the field; the spec reports it as its own.
"""

from __future__ import annotations

from typing import Any

from lightning_cls.inference.tasks import TASKS, Task, create_task
from lightning_cls.inference.trust import check_reject


class DecisionError(ValueError):
    """A bad decision setting; ``field`` names the spec key (``threshold``, ``reject``, ...)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def build_decision(
    task: str,
    threshold: float | None,
    temperature: Any,
    reject: dict[str, Any] | None,
    conformal: dict[str, Any] | None,
    num_classes: int,
) -> Task:
    """The task ``task`` names, with its threshold (None: the task's default), temperature,
    rejection and prediction-set rules checked and given to it as it is built (normalised: a list of
    temperatures becomes a tuple, ...); read them back from the returned ``Task``."""
    if task not in TASKS:
        raise DecisionError(
            "task", f"task={task!r} is not known; use one of {', '.join(TASKS.names())}."
        )
    try:  # the task owns its threshold: its default, and what values it takes
        bare = create_task(task, threshold)
    except ValueError:
        raise DecisionError(
            "threshold", f"threshold={threshold} is not a probability strictly between 0 and 1."
        ) from None
    try:
        temperature = 1.0 if temperature is None else temperature
        temperature = bare.calibration.check_temperature(temperature, num_classes)
    except ValueError as err:
        raise DecisionError("temperature", str(err)) from None
    try:
        reject = check_reject(reject)
    except ValueError as err:
        raise DecisionError("reject", str(err)) from None
    try:
        conformal = bare.calibration.check_conformal(conformal)
    except ValueError as err:
        raise DecisionError("conformal", str(err)) from None
    # Built once with its trust settings (the task takes them when it is made, never later).
    return create_task(task, threshold, temperature, reject, conformal)
