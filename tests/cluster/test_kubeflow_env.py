"""The Kubeflow TrainJob of examples/kubeflow/ as its two pods would run it, on one machine: the
runtime's command with the TrainJob's args, and nothing but the environment Kubeflow Trainer
v2.2's torch policy gives each node (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK,
PET_MASTER_ADDR, PET_MASTER_PORT; torchrun's static rendezvous). Two agents leave one run folder,
the TrainJob's ``hydra.run.dir``, with the metrics of the same job under ``trainer=ddp_sim``.

Changed from the manifest only where this machine differs: ``trainer=ddp_cpu`` for
``trainer=ddp`` (no GPUs), the run folder under ``tmp_path``, and the suite's small settings."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from test_kubeflow_manifests import EXAMPLES, TORCH_ENV
from test_torchrun_nodes import free_port
from train_runs import SMALL, env, results

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def node_command(run_dir) -> list[str]:
    """The runtime's container command plus the TrainJob's args, adapted to this machine."""
    runtime = yaml.safe_load((EXAMPLES / "cluster_training_runtime.yaml").read_text())
    (job,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    (container,) = job["template"]["spec"]["template"]["spec"]["containers"]
    args = yaml.safe_load((EXAMPLES / "trainjob.yaml").read_text())["spec"]["trainer"]["args"]
    args = ["trainer=ddp_cpu" if a == "trainer=ddp" else a for a in args]
    args = [f"hydra.run.dir={run_dir}" if a.startswith("hydra.run.dir=") else a for a in args]
    torchrun, *rest = container["command"]
    assert torchrun == "torchrun"
    return [sys.executable, "-m", "torch.distributed.run", *rest, *args, *SMALL,
            "trainer.max_epochs=1", f"paths.root_dir={run_dir.parent}"]  # fmt: skip


def test_the_trainjobs_nodes_with_trainer_v2_env_train_one_folder(ddp_sim, tmp_path):
    run_dir = tmp_path / "runs" / "digits"
    pod = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_MASTER_ADDR": "127.0.0.1",
           "PET_MASTER_PORT": str(free_port())}  # fmt: skip
    assert {*pod, "PET_NODE_RANK"} == set(TORCH_ENV)
    nodes = [
        subprocess.Popen(
            node_command(run_dir),
            cwd=tmp_path,
            env=env(**pod, PET_NODE_RANK=str(rank)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = [n.communicate(timeout=300)[0] for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    assert list((tmp_path / "runs").iterdir()) == [run_dir]
    assert results(run_dir)["best_val_acc"] is not None
    assert results(run_dir) == ddp_sim
