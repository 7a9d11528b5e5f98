"""examples/kubeflow/local_sdk.py: the digits job through the Kubeflow SDK's local backend (no
Kubernetes) leaves one run folder with the metrics of ``trainer=ddp_sim``; and what that backend
does with a job, as docs/guides/cluster.md says it, from the script it writes (offline, fast).

Opt-in (``LIGHTNING_CLS_KUBEFLOW_SDK=1``, the ``kubeflow`` extra): the backend makes a fresh
virtual environment per job and pip-installs torch and this repository into it from the
package index, 5.8 GB and 240 s on the 2-vCPU machine (docs/guides/cluster.md), which
neither an offline suite nor its time budget allows."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
from test_kubeflow_manifests import EXAMPLES
from train_runs import results


def test_the_local_backend_runs_the_function_in_a_fresh_venv_with_torch_from_the_index(
    tmp_path, monkeypatch
):
    pytest.importorskip(
        "kubeflow.trainer", reason="the kubeflow extra: pip install -e '.[kubeflow]'"
    )
    from kubeflow.trainer import CustomTrainer
    from kubeflow.trainer.backends.localprocess import utils
    from kubeflow.trainer.backends.localprocess.constants import local_runtimes

    monkeypatch.syspath_prepend(str(EXAMPLES))
    from local_sdk import train_digits

    (runtime,) = copy.deepcopy(local_runtimes)  # the SDK's own list stays as it is
    assert (runtime.name, runtime.trainer.packages) == ("torch-distributed", ["torch"])
    runtime.trainer = utils.get_local_runtime_trainer(runtime.name, str(tmp_path), "torch")
    trainer = CustomTrainer(func=train_digits, func_args={"argv": ["x=1"]},
                            packages_to_install=["lightning-cls"])  # fmt: skip
    _, _, script = utils.get_local_train_job_script("job", str(tmp_path), trainer, runtime)
    assert f"-m venv --without-pip {tmp_path}" in script  # no --system-site-packages
    assert '--index-url https://pypi.org/simple "torch" "lightning-cls"' in script
    assert f'{tmp_path}/bin/torchrun "{tmp_path}/train_job.py"' in script
    assert (tmp_path / "train_job.py").read_text().endswith("train_digits({'argv': ['x=1']})\n")


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("LIGHTNING_CLS_KUBEFLOW_SDK") != "1",
    reason="opt-in, LIGHTNING_CLS_KUBEFLOW_SDK=1: installs torch into a new venv from the index",
)
def test_the_sdks_local_job_trains_one_folder_with_ddp_sims_metrics(ddp_sim, tmp_path):
    pytest.importorskip(
        "kubeflow.trainer", reason="the kubeflow extra: pip install -e '.[kubeflow]'"
    )
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "local_sdk.py"), str(run_dir)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=1900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert list(tmp_path.iterdir()) == [run_dir]
    assert results(run_dir) == ddp_sim
