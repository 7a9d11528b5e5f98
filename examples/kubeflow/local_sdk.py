"""Train digits as a TrainJob of the Kubeflow SDK's local backend (no Kubernetes): the SDK makes a
fresh virtual environment, pip-installs torch and this repository into it, and starts the job
with that environment's torchrun. PET_NPROC_PER_NODE=2 makes torchrun start two processes, each
running ``python -m lightning_cls.train trainer=ddp_cpu trainer.devices=2`` (the suite's small
settings): the run ``trainer=ddp_sim`` simulates, so its results.json matches ddp_sim's.

    python examples/kubeflow/local_sdk.py outputs/train/kubeflow   # needs the `kubeflow` extra

Prints the job's status, its seconds and the end of its log; exits 1 unless it completed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The suite's small digits run (tests/cluster/train_runs.py's SMALL, one epoch).
SMALL = [
    "trainer.max_epochs=1",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "trainer.deterministic=true",
    "~callbacks.progress_bar",
    "~callbacks.model_summary",
    "~callbacks.plots",
    "~callbacks.model_weights",
    "prediction_mosaic=false",
]


def train_digits(params):
    """The job's function. The SDK copies its source into a file that calls it with func_args as
    one dict, so it imports what it needs itself."""
    import runpy
    import sys

    sys.argv = ["lightning_cls.train", *params["argv"]]
    runpy.run_module("lightning_cls.train", run_name="__main__")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run folder (hydra.run.dir)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds to wait for the job")
    args = parser.parse_args()
    from kubeflow.trainer import CustomTrainer, LocalProcessBackendConfig, TrainerClient

    run_dir = args.run_dir.resolve()
    argv = ["trainer=ddp_cpu", "trainer.devices=2", f"hydra.run.dir={run_dir}",
            f"paths.root_dir={run_dir.parent}", *SMALL]  # fmt: skip
    # The local backend runs the job with exactly this environment (none of ours is inherited).
    env = {"PET_NPROC_PER_NODE": "2", "OMP_NUM_THREADS": "1", "HOME": os.environ.get("HOME", "/"),
           "PATH": "/usr/local/bin:/usr/bin:/bin"}  # fmt: skip
    client = TrainerClient(backend_config=LocalProcessBackendConfig())
    started = time.monotonic()
    name = client.train(
        runtime=client.get_runtime("torch-distributed"),
        trainer=CustomTrainer(
            func=train_digits,
            func_args={"argv": argv},
            packages_to_install=["torch==2.14.1", f"lightning-cls @ {REPO.as_uri()}"],
            env=env,
        ),
    )
    job = client.wait_for_job_status(
        name, status={"Complete", "Failed"}, timeout=args.timeout, polling_interval=5
    )
    print(f"job {name}: {job.status} in {time.monotonic() - started:.0f} s")
    print("\n".join(client.get_job_logs(name))[-3000:])
    return 0 if job.status == "Complete" else 1


if __name__ == "__main__":
    sys.exit(main())
