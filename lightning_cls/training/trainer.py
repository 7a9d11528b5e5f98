"""``build_trainer``: the one place a command's Trainer is made (train, eval).

What every Trainer of this package needs beyond its config, in one function instead of a copy
per command: ``trainer.precision=auto`` resolved for the hardware (``precision.py``), a SLURM
``-n N`` job step's task count put where Lightning reads it (``cluster.py``), and the loggers
(none: ``logger=False``, so Lightning adds no default TensorBoard logger of its own).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from lightning_cls.training.cluster import fill_slurm_tasks_per_node
from lightning_cls.training.precision import resolve_precision

if TYPE_CHECKING:
    import pytorch_lightning as pl


def build_trainer(
    make: Callable[..., pl.Trainer],
    precision: str | int = "32-true",
    accelerator: str | None = "auto",
    callbacks: Sequence[Any] = (),
    loggers: Sequence[Any] = (),
) -> pl.Trainer:
    """``make(precision=..., callbacks=[...], logger=[...] or False)``: the Trainer with
    ``precision`` resolved for ``accelerator`` (``auto``: bf16 only where it is native).

    ``make`` takes the Trainer's other settings from the caller: a command passes
    ``partial(instantiate, cfg.trainer)``, Python code ``partial(pl.Trainer, max_epochs=3)``.
    """
    resolved = resolve_precision(precision, accelerator)
    fill_slurm_tasks_per_node()  # sbatch -n N: the --ntasks-per-node Lightning asks for
    return make(precision=resolved, callbacks=list(callbacks), logger=list(loggers) or False)
