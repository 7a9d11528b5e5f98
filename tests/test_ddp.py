"""Multi-process training on CPU (gloo): exact distributed evaluation and torchrun's run dir."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from hydra_helpers import QUIET_TRAINER, compose
from lightning_cls.train import train

QUIET = [*QUIET_TRAINER[2:], "~callbacks.plots", "~callbacks.model_weights", "logger=csv"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("ddp")
    summary = train(
        compose(overrides=["trainer=cpu", *QUIET, "trainer.max_epochs=2", "test=false"], tmp=tmp)
    )
    return summary["best_ckpt"]


@pytest.mark.slow
def test_two_process_test_metrics_equal_one_process(checkpoint, tmp_path):
    # digits' test split has 359 images: 180 + 179 over two ranks. With global batch 2 each
    # rank runs batches of one image, so the ranks even run different numbers of steps.
    common = [*QUIET, "train=false", f"ckpt_path={checkpoint}", "data.batch_size=2"]
    one = train(compose(overrides=[*common, "trainer=cpu"], tmp=tmp_path / "one"))
    two = train(compose(overrides=[*common, "trainer=ddp_sim"], tmp=tmp_path / "two"))
    acc = one["test"]["test/acc"]
    assert 0.2 < acc < 1.0  # not 0% or 100%: a padded duplicate would move it
    assert two["test"]["test/acc"] == acc  # to the last digit
    assert two["test"]["test/loss"] == pytest.approx(one["test"]["test/loss"], rel=1e-6)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not on PATH")
def test_torchrun_ranks_share_one_run_directory(tmp_path):
    cmd = [
        "torchrun",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "lightning_cls.train",
        "trainer=ddp",
        "trainer.accelerator=cpu",
        "trainer.sync_batchnorm=false",
        "trainer.max_epochs=1",
        "+trainer.limit_train_batches=4",
        *QUIET,
        f"paths.root_dir={tmp_path}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [p for p in (tmp_path / "outputs" / "train").glob("*/*") if p.is_dir()]
    assert len(runs) == 1, runs  # one Hydra run dir for both ranks
    results = json.loads((runs[0] / "results.json").read_text())
    assert results["test"]["test/acc"] > 0.1
    assert (runs[0] / "checkpoints" / "digits_simplecnn" / "last.ckpt").is_file()
