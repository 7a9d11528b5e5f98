"""The sweeper's config schema, registered as ``hydra/sweeper=optuna`` (Hydra imports every
module of the ``hydra_plugins`` namespace package when it starts, which runs the store)."""

# No `from __future__ import annotations`: Hydra's plugin scan loads this module outside
# sys.modules, where dataclasses cannot resolve string annotations.
from dataclasses import dataclass
from typing import Any, Dict, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.lightning_cls_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    # sampler/pruner are built by the sweeper once it has checked that Optuna is installed.
    _recursive_: bool = False
    # maximize or minimize the value main() returns (train.py: best `optimized_metric`).
    direction: str = "maximize"
    # Trials this invocation adds to the study (a resumed study keeps its earlier ones).
    n_trials: int = 20
    # Trials asked at once and launched together (in parallel with a parallel launcher).
    n_jobs: int = 1
    # Same name + storage = the same study: rerun the sweep to resume or extend it.
    study_name: Optional[str] = None
    # SQLAlchemy URL (sqlite:///path.db, postgresql://...); null: sqlite in the sweep dir.
    storage: Optional[str] = None
    # e.g. {_target_: optuna.samplers.TPESampler, seed: 42}; null: Optuna's default (TPE).
    sampler: Any = None
    # e.g. {_target_: optuna.pruners.MedianPruner, n_warmup_steps: 2}; null: no pruning.
    pruner: Any = None
    # key: interval(a, b) | int(interval(a, b)) | tag(log, interval(a, b)) | choice(...) |
    # range(a, b[, step]) | a fixed value.
    params: Optional[Dict[str, Any]] = None


ConfigStore.instance().store(
    group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="lightning_cls"
)
