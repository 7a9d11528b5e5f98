"""One run folder per job: every rank, node and requeue of a job resolves the same
``hydra.run.dir``, and only the first process writes ``.hydra/`` (``conf/hydra/train.yaml``).

The environments are the variables the launchers set (srun of an sbatch job, an array task,
a requeued job, two torchrun agents), composed through the real config. The SLURM and torchrun
runs in tests/cluster/test_slurm.py and test_torchrun.py check the same on real launchers."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from lightning_cls.cli.resolvers import register_resolvers

LAUNCHER_VARS = (
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_RESTART_COUNT",
    "TORCHELASTIC_RUN_ID",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
)


def srun_task(job: str, rank: int, **extra) -> dict:
    """What srun sets in task ``rank`` of ``sbatch --ntasks-per-node=2 --job-name=train``."""
    return {
        "SLURM_JOB_ID": job,
        "SLURM_JOB_NAME": "train",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank),
        "SLURM_NTASKS": "2",
        "SLURM_NTASKS_PER_NODE": "2",
        **extra,
    }


def torchrun_worker(run_id: str, node: int, nodes: int = 2) -> dict:
    """What torchrun --nnodes=<nodes> --nproc_per_node=1 sets in node ``node``'s worker."""
    return {
        "TORCHELASTIC_RUN_ID": run_id,
        "RANK": str(node),
        "LOCAL_RANK": "0",
        "GROUP_RANK": str(node),
        "WORLD_SIZE": str(nodes),
        "LOCAL_WORLD_SIZE": "1",
    }


def resolve(monkeypatch, env: dict, overrides=()) -> tuple[str, str | None]:
    """(run dir, .hydra subdir) that a process started with ``env`` resolves."""
    register_resolvers()
    with monkeypatch.context() as m:
        for name in LAUNCHER_VARS:
            m.delenv(name, raising=False)
        for name, value in env.items():
            m.setenv(name, value)
        hydra = _hydra_node(overrides)
        return OmegaConf.select(hydra, "run.dir"), OmegaConf.select(hydra, "output_subdir")


def _hydra_node(overrides):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from lightning_cls import config_dir

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = hydra_compose(
            "train", overrides=["paths.root_dir=/jobs", *overrides], return_hydra_config=True
        )
    return cfg.hydra


def test_every_rank_and_requeue_of_a_slurm_job_shares_one_folder(monkeypatch):
    rank0 = resolve(monkeypatch, srun_task("4711", 0))
    rank1 = resolve(monkeypatch, srun_task("4711", 1))
    requeued = resolve(monkeypatch, srun_task("4711", 0, SLURM_RESTART_COUNT="1"))
    assert rank0 == ("/jobs/outputs/train/slurm/4711", ".hydra")
    assert rank1 == ("/jobs/outputs/train/slurm/4711", None)  # no second .hydra
    assert requeued == rank0
    assert resolve(monkeypatch, srun_task("4712", 0))[0] == "/jobs/outputs/train/slurm/4712"


def test_an_array_task_gets_its_own_folder(monkeypatch):
    # SLURM_JOB_ID differs per array task too, but the array id + task id is what users see.
    task3 = srun_task("5003", 0, SLURM_ARRAY_JOB_ID="5000", SLURM_ARRAY_TASK_ID="3")
    assert resolve(monkeypatch, task3)[0] == "/jobs/outputs/train/slurm/5000_3"


def test_an_interactive_allocation_runs_each_command_in_its_own_folder(monkeypatch):
    env = {**srun_task("4711", 0), "SLURM_JOB_NAME": "interactive"}
    run_dir, subdir = resolve(monkeypatch, env)
    assert "slurm" not in run_dir and subdir == ".hydra"


def test_an_explicit_run_dir_wins(monkeypatch):
    run_dir, _ = resolve(monkeypatch, srun_task("4711", 1), ["hydra.run.dir=/mine"])
    assert run_dir == "/mine"


def test_torchrun_nodes_share_the_rendezvous_ids_folder(monkeypatch):
    node0 = resolve(monkeypatch, torchrun_worker("job42", 0))
    node1 = resolve(monkeypatch, torchrun_worker("job42", 1))
    assert node0 == ("/jobs/outputs/train/torchrun/job42", ".hydra")
    assert node1 == ("/jobs/outputs/train/torchrun/job42", None)


def test_multi_node_torchrun_without_a_rendezvous_id_is_refused(monkeypatch):
    with pytest.raises(Exception, match=r"default --rdzv-id=none.*pass the same --rdzv-id"):
        resolve(monkeypatch, torchrun_worker("none", 1))


def test_single_node_torchrun_keeps_the_agents_start_time(monkeypatch):
    one_node = {**torchrun_worker("none", 1, nodes=2), "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1"}
    run_dir, subdir = resolve(monkeypatch, one_node)
    assert run_dir.startswith("/jobs/outputs/train/2") and subdir is None


def test_slurm_wins_over_torchrun_inside_a_job(monkeypatch):
    env = {**torchrun_worker("none", 1), **srun_task("77", 1)}
    assert resolve(monkeypatch, env)[0] == "/jobs/outputs/train/slurm/77"
