"""``sbatch -n N`` (no ``--ntasks-per-node``): the task count Lightning asks for is filled in
from what SLURM sets, or the job ends in one line naming the fix."""

from __future__ import annotations

import pytest

from lightning_cls.training.cluster import fill_slurm_tasks_per_node


def srun_env(ntasks: str, tasks_per_node: str, **extra) -> dict:
    """What srun sets in a task of ``sbatch -n <ntasks>`` (SLURM_NTASKS_PER_NODE unset)."""
    return {
        "SLURM_JOB_ID": "9",
        "SLURM_JOB_NAME": "train",
        "SLURM_NTASKS": ntasks,
        "SLURM_TASKS_PER_NODE": tasks_per_node,
        **extra,
    }


@pytest.mark.parametrize(("ntasks", "spread", "per_node"), [("2", "2", "2"), ("4", "2(x2)", "2")])
def test_an_even_spread_becomes_ntasks_per_node(ntasks, spread, per_node):
    env = srun_env(ntasks, spread)
    assert fill_slurm_tasks_per_node(env) == per_node
    assert env["SLURM_NTASKS_PER_NODE"] == per_node


def test_an_uneven_spread_is_one_line_naming_the_fix():
    with pytest.raises(
        ValueError, match=r"-n 3 spread the tasks unevenly .*=2,1\).*--ntasks-per-node"
    ):
        fill_slurm_tasks_per_node(srun_env("3", "2,1"))


@pytest.mark.parametrize(
    "env",
    [
        {},  # no SLURM
        srun_env("1", "1"),  # one task
        srun_env("2", "2", SLURM_NTASKS_PER_NODE="2"),  # --ntasks-per-node given
        srun_env("2", "2", SLURM_JOB_NAME="interactive"),  # a shell, not a batch job
    ],
)
def test_nothing_changes_elsewhere(env):
    before = dict(env)
    assert fill_slurm_tasks_per_node(env) is None
    assert env == before


def test_lightning_accepts_the_filled_environment(monkeypatch):
    from lightning_fabric.plugins.environments import SLURMEnvironment

    env = srun_env("2", "2", SLURM_PROCID="1", SLURM_LOCALID="1", SLURM_NODEID="0")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SLURM_NTASKS_PER_NODE", raising=False)
    with pytest.raises(RuntimeError, match="--ntasks-per-node"):
        SLURMEnvironment()  # what -n 2 met before
    fill_slurm_tasks_per_node()
    slurm = SLURMEnvironment()
    slurm.validate_settings(num_devices=2, num_nodes=1)
    assert (slurm.world_size(), slurm.global_rank()) == (2, 1)


def test_strategy_is_a_trainer_key_and_ddp_cpu_composes(tmp_path):
    from helpers.hydra_configs import compose

    assert compose(overrides=["trainer.strategy=ddp"], tmp=tmp_path).trainer.strategy == "ddp"
    cpu = compose(overrides=["trainer=ddp_cpu"], tmp=tmp_path).trainer
    assert (cpu.accelerator, cpu.devices, cpu.strategy) == ("cpu", 2, "ddp")
