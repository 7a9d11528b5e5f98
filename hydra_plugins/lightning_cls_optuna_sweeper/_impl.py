"""The sweep loop: ask the study for ``n_jobs`` trials, launch them as Hydra jobs, tell the
study how each ended (COMPLETE, PRUNED or FAIL), repeat until ``n_trials`` were run.

Each trial's job receives ``optuna.storage``, ``optuna.study_name`` and
``optuna.trial_number`` overrides, so its ``OptunaPruning`` callback reports to that trial
from whatever process or machine the launcher runs it on. A job that fails (NaN, out of
memory, a bad sampled config) becomes a FAIL trial with the error in its ``error`` user
attribute; the sweep goes on. ``optimization_results.yaml`` in the sweep dir is rewritten after
every batch with the best params and every trial's state.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import HydraContext, TaskFunction
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from optuna.trial import TrialState

from hydra_plugins.lightning_cls_optuna_sweeper.search_space import as_override, parse
from lightning_cls.training.trials import PRUNED_ATTR, PRUNER_ATTR

log = logging.getLogger(__name__)
DIRECTIONS = ("maximize", "minimize")


class OptunaSweeperImpl:
    def __init__(
        self,
        direction: str,
        n_trials: int,
        n_jobs: int,
        study_name: str | None,
        storage: str | None,
        sampler: Any,
        pruner: Any,
        params: dict | None,
    ) -> None:
        if direction not in DIRECTIONS:
            raise ValueError(f"hydra.sweeper.direction={direction!r}; use maximize or minimize.")
        if n_trials < 1 or n_jobs < 1:
            raise ValueError(
                f"hydra.sweeper.n_trials={n_trials} and n_jobs={n_jobs} must both be >= 1."
            )
        self.direction, self.n_trials, self.n_jobs = direction, n_trials, n_jobs
        self.study_name, self.storage = study_name, storage
        # Configs (the sweeper is built with _recursive_=false), built in _study; objects when
        # the sweeper is constructed in Python.
        self.sampler, self.pruner = sampler, pruner
        self.params = dict(params or {})

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.hydra_context, self.config = hydra_context, config
        pruner = config.hydra.sweeper.get("pruner")
        self.pruner_spec = OmegaConf.to_container(pruner, resolve=True) if pruner else None
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> list[JobReturn]:
        loader = self.hydra_context.config_loader
        lines = [f"{k}={v}" for k, v in self.params.items()] + list(arguments)
        fixed, space = parse(lines, OverridesParser.create(config_loader=loader))
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        study = self._study(sweep_dir)
        log.info(
            "Study %s in %s: %d trials so far; adding %d, %d at a time.",
            study.study_name,
            self.storage_url,
            len(study.trials),
            self.n_trials,
            self.n_jobs,
        )
        returns: list[JobReturn] = []
        asked = 0
        while asked < self.n_trials:
            trials = [study.ask(space) for _ in range(min(self.n_jobs, self.n_trials - asked))]
            asked += len(trials)
            returns += self._run_batch(study, trials, fixed)
            write_results(study, sweep_dir / "optimization_results.yaml", self.storage_url)
        return returns

    def _study(self, sweep_dir: Path) -> optuna.Study:
        self.storage_url = self.storage or f"sqlite:///{(sweep_dir / 'optuna.db').resolve()}"
        if self.storage_url.startswith("sqlite:///"):  # sqlite needs the folder to exist
            Path(self.storage_url[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
        study = optuna.create_study(
            storage=self.storage_url,
            study_name=self.study_name or "lightning_cls",
            sampler=_built(self.sampler),
            pruner=_built(self.pruner) or optuna.pruners.NopPruner(),
            direction=self.direction,
            load_if_exists=True,
        )
        if study.direction.name.lower() != self.direction:
            raise ValueError(
                f"Study {study.study_name} in {self.storage_url} was created to "
                f"{study.direction.name.lower()}, not {self.direction}; use another study_name."
            )
        # Trial jobs rebuild the pruner from here: a storage holds no pruner object.
        study.set_user_attr(
            PRUNER_ATTR, self.pruner_spec or {"_target_": "optuna.pruners.NopPruner"}
        )
        return study

    def _run_batch(self, study: optuna.Study, trials: list, fixed: list[str]) -> list[JobReturn]:
        batch, launched = [], []
        for trial in trials:
            overrides = [
                *fixed,
                *(as_override(k, v) for k, v in trial.params.items()),
                as_override("optuna.storage", self.storage_url),
                as_override("optuna.study_name", study.study_name),
                f"optuna.trial_number={trial.number}",
            ]
            try:  # a config that cannot be composed fails this trial, not the sweep
                self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
            except Exception as err:  # noqa: BLE001 - any composition error
                _fail(study, trial, err)
                continue
            batch.append(overrides)
            launched.append(trial)
        if not batch:
            return []
        results = self.launcher.launch(batch, initial_job_idx=launched[0].number)
        # Trial.user_attrs is a cache from ask(); the jobs wrote theirs to the storage since.
        stored = {t.number: t for t in study.get_trials(deepcopy=False)}
        for trial, ret in zip(launched, results):
            _tell(study, trial, ret, stored[trial.number].user_attrs)
        return list(results)


def _built(obj: Any) -> Any:
    """A sampler/pruner object, instantiating it if it is still a config."""
    return instantiate(obj) if isinstance(obj, (dict, DictConfig)) else obj


def _tell(study: optuna.Study, trial: optuna.Trial, ret: JobReturn, user_attrs: dict) -> None:
    """Record how a trial's job ended (``user_attrs``: as the job left them in the storage)."""
    if ret.status != JobStatus.COMPLETED:
        err = ret._return_value  # JobReturn.return_value re-raises a failed job's exception
        if isinstance(err, optuna.TrialPruned):
            study.tell(trial, state=TrialState.PRUNED)
        else:
            _fail(study, trial, err)
        return
    if user_attrs.get(PRUNED_ATTR) is not None:  # set by the job's OptunaPruning
        study.tell(trial, state=TrialState.PRUNED)
        log.info("Trial %d: pruned after epoch %s.", trial.number, user_attrs[PRUNED_ATTR])
        return
    value = ret.return_value
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        _fail(study, trial, ValueError(f"the job returned {value!r}, not a finite number"))
        return
    study.tell(trial, float(value))
    log.info("Trial %d: %s -> %.5g", trial.number, trial.params, value)


def _fail(study: optuna.Study, trial: optuna.Trial, err: BaseException | None) -> None:
    message = f"{type(err).__name__}: {err}"[:2000]
    trial.set_user_attr("error", message)
    study.tell(trial, state=TrialState.FAIL)
    log.warning("Trial %d failed (%s); the sweep goes on.", trial.number, message)


def write_results(study: optuna.Study, path: Path, storage_url: str) -> None:
    """``optimization_results.yaml``: best params/value and every trial's state."""
    finished = [t for t in study.trials if t.state == TrialState.COMPLETE]
    best = study.best_trial if finished else None
    counts = {s.name.lower(): 0 for s in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
    for t in study.trials:
        if t.state.name.lower() in counts:
            counts[t.state.name.lower()] += 1
    results = {
        "name": "optuna",
        "study_name": study.study_name,
        "storage": storage_url,
        "direction": study.direction.name.lower(),
        "best_params": dict(best.params) if best else None,
        "best_value": best.value if best else None,
        "best_trial": best.number if best else None,
        "n_trials": counts,
        "trials": [
            {
                "number": t.number,
                "state": t.state.name,
                "value": t.value,
                "params": dict(t.params),
                **({"error": t.user_attrs["error"]} if "error" in t.user_attrs else {}),
                **({PRUNED_ATTR: t.user_attrs[PRUNED_ATTR]} if PRUNED_ATTR in t.user_attrs else {}),
            }
            for t in study.trials
        ],
    }
    OmegaConf.save(OmegaConf.create(results), path)
