"""The optuna sweeper plugin (hydra/sweeper=optuna) and its pruning callback."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
import yaml

optuna = pytest.importorskip("optuna")  # the `sweep` extra

from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: E402
from hydra.core.utils import JobReturn, JobStatus  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from hydra_plugins.lightning_cls_optuna_sweeper._impl import _tell, write_results  # noqa: E402
from hydra_plugins.lightning_cls_optuna_sweeper.search_space import as_override, parse  # noqa: E402
from lightning_cls.callbacks.optuna_pruning import OptunaPruning, build_pruner  # noqa: E402
from lightning_cls.summarize import summarize  # noqa: E402
from lightning_cls.training.trials import PRUNED_ATTR  # noqa: E402

FAST = [
    "trainer.enable_progress_bar=false",
    "~callbacks.progress_bar",
    "~callbacks.model_summary",
    "~callbacks.plots",
    "~callbacks.model_weights",
]


def test_params_become_distributions_and_values_round_trip():
    fixed, space = parse(
        [
            "lr=tag(log, interval(1e-4, 1e-1))",
            "width=int(interval(8, 64))",
            "bs=choice(32, 64)",
            "depth=range(1, 5)",
            "model=mlp",
        ],
        OverridesParser.create(),
    )
    assert fixed == ["model=mlp"]
    assert space["lr"] == optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)
    assert space["width"] == optuna.distributions.IntDistribution(8, 64)
    assert space["bs"] == optuna.distributions.CategoricalDistribution([32, 64])
    assert space["depth"] == optuna.distributions.IntDistribution(1, 4)  # range() excludes 5
    parser = OverridesParser.create()
    for value in (1e-05, 3, "mlp", "a b", "it's", True):
        assert parser.parse_overrides([as_override("k", value)])[0].value() == value


def test_unsupported_sweep_is_named():
    with pytest.raises(
        ValueError, match=r"model: model=glob\(\*\) is not a sweep the optuna sweeper"
    ):
        parse(["model=glob(*)"], OverridesParser.create())


def test_pruner_spec_is_checked():
    pruner = build_pruner(
        {
            "_target_": "optuna.pruners.PatientPruner",
            "patience": 2,
            "wrapped_pruner": {"_target_": "optuna.pruners.MedianPruner"},
        }
    )
    assert isinstance(pruner, optuna.pruners.PatientPruner)
    with pytest.raises(ValueError, match=r"pruner _target_='os.system' is not an Optuna pruner"):
        build_pruner({"_target_": "os.system"})
    with pytest.raises(
        ValueError, match="OptunaPruning needs storage, study_name and trial_number"
    ):
        OptunaPruning(storage="sqlite:///x.db", study_name=None, trial_number=None)


def _job(status: JobStatus, value) -> JobReturn:
    ret = JobReturn()
    ret.status, ret._return_value = status, value
    return ret


def test_each_way_a_job_ends_is_recorded_and_the_sweep_goes_on(tmp_path):
    study = optuna.create_study(direction="maximize")
    trials = [study.ask({"x": optuna.distributions.FloatDistribution(0, 1)}) for _ in range(5)]
    _tell(study, trials[0], _job(JobStatus.COMPLETED, 0.9), {})
    _tell(study, trials[1], _job(JobStatus.COMPLETED, 0.4), {PRUNED_ATTR: 1})
    _tell(study, trials[2], _job(JobStatus.FAILED, FloatingPointError("loss is nan")), {})
    _tell(study, trials[3], _job(JobStatus.COMPLETED, math.nan), {})
    _tell(study, trials[4], _job(JobStatus.FAILED, optuna.TrialPruned()), {})
    states = [t.state for t in study.trials]
    assert states == [
        TrialState.COMPLETE,
        TrialState.PRUNED,
        TrialState.FAIL,
        TrialState.FAIL,
        TrialState.PRUNED,
    ]
    assert study.trials[2].user_attrs["error"] == "FloatingPointError: loss is nan"
    write_results(study, tmp_path / "r.yaml", "memory")
    results = yaml.safe_load((tmp_path / "r.yaml").read_text())
    assert results["best_trial"] == 0 and results["best_params"] == study.trials[0].params
    assert results["n_trials"] == {"complete": 1, "pruned": 2, "fail": 2}


def _sweep(server, env: dict, tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    """``python -m lightning_cls.train hparams_search=digits_optuna ...`` as typed, forked from
    the pre-imported server (tests/conftest.py)."""
    argv = ["-m", "lightning_cls.train", "hparams_search=digits_optuna", *FAST]
    argv += [f"paths.root_dir={tmp_path}", "prediction_mosaic=false", *overrides]
    proc = server.run(argv, tmp_path, env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_sweep_prunes_across_processes_records_and_resumes(tmp_path, fork_server, fork_env):
    storage = f"sqlite:///{tmp_path}/study.db"
    # A threshold pruner makes the outcome independent of trial order: lr=1e-5 learns next
    # to nothing in 2 epochs (val/acc ~0.1) and is pruned; lr=3e-3 passes 0.3 easily.
    common = [
        "trainer.max_epochs=3",
        f"hydra.sweeper.storage={storage}",
        "hydra.sweeper.sampler.seed=1",
        "hydra.sweeper.pruner._target_=optuna.pruners.ThresholdPruner",
        "~hydra.sweeper.pruner.n_startup_trials",
        "+hydra.sweeper.pruner.lower=0.3",
        "hydra.sweeper.pruner.n_warmup_steps=1",
        'hydra.sweeper.params={optimizer.lr: "choice(3e-3, 1e-5)"}',
    ]
    _sweep(
        fork_server,
        fork_env,
        tmp_path,
        *common,
        "hydra.sweeper.n_trials=4",
        f"hydra.sweep.dir={tmp_path}/first",
    )
    results = yaml.safe_load((tmp_path / "first" / "optimization_results.yaml").read_text())
    by_state = {
        s: [t for t in results["trials"] if t["state"] == s] for s in ("COMPLETE", "PRUNED")
    }
    assert by_state["PRUNED"] and by_state["COMPLETE"], results
    assert all(
        t["params"]["optimizer.lr"] == 1e-5 and t[PRUNED_ATTR] == 1 for t in by_state["PRUNED"]
    )
    assert all(t["params"]["optimizer.lr"] == 3e-3 for t in by_state["COMPLETE"])
    assert results["best_params"]["optimizer.lr"] == 3e-3 and results["best_value"] > 0.5
    # The pruned jobs stopped after their second epoch and were not tested.
    pruned = json.loads(
        (tmp_path / "first" / str(by_state["PRUNED"][0]["number"]) / "results.json").read_text()
    )
    assert pruned["pruned_at_epoch"] == 1 and pruned["test"] == {}
    # Same storage + study name: the study resumes and grows.
    _sweep(
        fork_server,
        fork_env,
        tmp_path,
        *common,
        "hydra.sweeper.n_trials=1",
        f"hydra.sweep.dir={tmp_path}/more",
    )
    study = optuna.load_study(study_name="digits_optuna", storage=storage)
    assert len(study.trials) == 5 and study.trials[4].state != TrialState.RUNNING
    table = summarize(tmp_path / "first")["md"].read_text().splitlines()
    assert "| PRUNED |" in table[-1] or any("| PRUNED |" in line for line in table)
    assert f"| {results['best_trial']} | COMPLETE |" in table[2]  # best job first
