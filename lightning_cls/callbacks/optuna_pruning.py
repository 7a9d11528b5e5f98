"""``OptunaPruning``: report a validation metric to an Optuna trial that lives in another
process, and stop the run when the study's pruner says so.

The optuna sweeper (``hydra/sweeper=optuna``) asks the study for a trial, then launches the
training job (in this process, a joblib worker or a SLURM node) with the study's storage URL,
its name and the trial number. This callback reopens that trial from the storage, so pruning
works with any launcher as long as the storage is shared (sqlite on one machine, any
SQLAlchemy URL on a cluster). The pruner is rebuilt from the study's ``pruner`` user attribute,
which the sweeper writes (the storage keeps no pruner object).

A pruned run is not an error: the callback stops training (``trainer.should_stop``), marks
the trial's ``pruned_at_epoch`` user attribute, and the sweeper records the trial as PRUNED
when the job returns. Under DDP only rank 0 talks to the storage and broadcasts the decision.
Optuna is imported lazily: ``lightning_cls`` does not depend on it.
"""

from __future__ import annotations

import importlib
import logging
import math
from typing import Any

import pytorch_lightning as pl

from lightning_cls.training.trials import PRUNED_ATTR, PRUNER_ATTR

log = logging.getLogger(__name__)


def build_pruner(spec: dict | None) -> Any:
    """An Optuna pruner from ``{"_target_": "optuna.pruners.MedianPruner", **kwargs}``;
    nested ``_target_`` dicts (e.g. PatientPruner's ``wrapped_pruner``) are built too."""
    if spec is None:
        return None
    if not isinstance(spec, dict) or "_target_" not in spec:
        raise ValueError(f"A pruner spec is a dict with a _target_ key, got {spec!r}.")
    kwargs = {k: build_pruner(v) if isinstance(v, dict) else v for k, v in spec.items()}
    target = kwargs.pop("_target_")
    if not target.startswith("optuna.pruners."):
        raise ValueError(
            f"pruner _target_={target!r} is not an Optuna pruner; use one of optuna.pruners.* "
            "(e.g. optuna.pruners.MedianPruner)."
        )
    module, name = target.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)(**kwargs)


class OptunaPruning(pl.Callback):
    """Report ``monitor`` after every validation epoch to trial ``trial_number`` of the study
    ``study_name`` in ``storage``; stop training when the trial should be pruned."""

    def __init__(self, storage: str, study_name: str, trial_number: int, monitor: str = "val/acc"):
        if not storage or not study_name or trial_number is None:
            raise ValueError(
                "OptunaPruning needs storage, study_name and trial_number (the optuna sweeper "
                f"sets optuna.storage/study_name/trial_number); got {storage!r}, "
                f"{study_name!r}, {trial_number!r}."
            )
        self.storage, self.study_name = storage, study_name
        self.trial_number, self.monitor = int(trial_number), monitor
        self.pruned_epoch: int | None = None
        self._trial = None

    def trial(self):
        """The running ``optuna.trial.Trial`` this job belongs to (opened on first use)."""
        if self._trial is None:
            import optuna

            storage = optuna.storages.get_storage(self.storage)
            study_id = storage.get_study_id_from_name(self.study_name)
            study = optuna.load_study(study_name=self.study_name, storage=storage)
            study.pruner = build_pruner(study.user_attrs.get(PRUNER_ATTR)) or study.pruner
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, self.trial_number)
            self._trial = optuna.trial.Trial(study, trial_id)
        return self._trial

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        prune = False
        if trainer.is_global_zero:
            prune = self._report(trainer)
        prune = trainer.strategy.broadcast(prune, src=0)
        if prune:
            self.pruned_epoch = trainer.current_epoch
            trainer.should_stop = True

    def _report(self, trainer: pl.Trainer) -> bool:
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            known = ", ".join(sorted(trainer.callback_metrics)) or "(none)"
            raise ValueError(
                f"optimized_metric={self.monitor!r} was not logged in validation; "
                f"logged metrics: {known}. Set optimized_metric to one of them."
            )
        value, epoch = float(value), trainer.current_epoch
        trial = self.trial()
        if not math.isfinite(value):  # a NaN metric is no evidence: prune the trial now
            trial.set_user_attr(PRUNED_ATTR, epoch)
            return True
        trial.report(value, step=epoch)
        if trial.should_prune():
            trial.set_user_attr(PRUNED_ATTR, epoch)
            log.info(
                "Optuna trial %d pruned after epoch %d (%s=%.4f).",
                self.trial_number,
                epoch,
                self.monitor,
                value,
            )
            return True
        return False
