"""The ``cluster`` marker: tests on a real one-node SLURM cluster (scripts/slurm_cluster.sh)
and on real torchrun agents. With ``CI=true`` they must run: a cluster that cannot start
fails them. Elsewhere they skip, saying what to install."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm_cluster.sh"
INSTALL = "apt-get install slurmctld slurmd slurm-client munge (as root), as .ci/run does"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cluster: needs a real SLURM cluster or torchrun; must run where CI=true"
    )


def unavailable(reason: str) -> None:
    """Fail under CI (the cluster must run there), skip elsewhere."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running one-node cluster: the one .ci/run started, or one started here (left running
    for the next session; ``scripts/slurm_cluster.sh stop`` stops it). A lock keeps two xdist
    workers from starting it at once."""
    missing = [c for c in ("munged", "slurmctld", "slurmd", "sbatch") if shutil.which(c) is None]
    if missing:
        unavailable(f"{', '.join(missing)} not found: {INSTALL}")
    if os.geteuid() != 0:
        unavailable("the test cluster's daemons run as root: run the cluster tests as root")
    with open("/tmp/lightning_cls_slurm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _node_up():
            proc = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True)
            if proc.returncode:
                unavailable(f"scripts/slurm_cluster.sh start failed: {proc.stderr.strip()}")


def _node_up() -> bool:
    proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    return proc.returncode == 0 and proc.stdout.split()[:1] in (["idle"], ["mixed"], ["allocated"])


@pytest.fixture(scope="session")
def ddp_sim(tmp_path_factory, fork_server, fork_env):
    """The results of the cluster tests' job on one machine: one epoch, two gloo processes
    (trainer=ddp_sim), the same seed and shards. They are forked (``ddp_fork``: the same
    launcher as ddp_sim's ``ddp_spawn``, the same results, without two fresh interpreters'
    imports); tests/test_ddp.py runs ``ddp_spawn`` itself."""
    from train_runs import results, train_forked

    run = tmp_path_factory.mktemp("ddp_sim") / "run"
    proc = train_forked(
        fork_server,
        fork_env,
        run,
        "trainer=ddp_sim",
        "trainer.strategy=ddp_fork",
        "trainer.max_epochs=1",
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    return results(run)


@pytest.fixture(scope="session")
def submitit():
    """submitit and Hydra's submitit launcher (the ``sweep`` extra)."""
    try:
        import submitit

        from hydra_plugins import hydra_submitit_launcher  # noqa: F401
    except ImportError:
        unavailable("hydra-submitit-launcher is not installed: pip install -e '.[sweep]'")
    return submitit
