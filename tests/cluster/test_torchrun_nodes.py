"""Multi-node torchrun on one machine: two agents (``--nnodes=2 --nproc_per_node=1``, c10d
rendezvous on 127.0.0.1) with ``trainer.num_nodes=2`` leave one run folder,
``torchrun/<rdzv id>``, with the metrics of the same job under ``trainer=ddp_sim``."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from train_runs import SMALL, env, results

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_torchrun_nodes_share_one_folder_and_ddp_sims_metrics(ddp_sim, tmp_path):
    port = free_port()
    agent = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
        "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=nodes2",
        "-m", "lightning_cls.train", "trainer=ddp_cpu", "trainer.devices=1",
        "trainer.num_nodes=2", *SMALL, "trainer.max_epochs=1", f"paths.root_dir={tmp_path}",
    ]  # fmt: skip
    agents = [
        subprocess.Popen(agent, cwd=tmp_path, env=env(), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]  # fmt: skip
    outputs = [a.communicate(timeout=300)[0] for a in agents]
    assert [a.returncode for a in agents] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    runs = [p for p in (tmp_path / "outputs" / "train").glob("*/*") if p.is_dir()]
    assert runs == [tmp_path / "outputs" / "train" / "torchrun" / "nodes2"]
    assert results(runs[0])["best_val_acc"] is not None
    assert results(runs[0]) == ddp_sim
