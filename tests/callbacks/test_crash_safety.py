"""A run killed with SIGKILL — mid-training or mid-save — leaves a loadable last.ckpt when
checkpoints go through ``AtomicCheckpointIO``; Lightning's default writer leaves a broken one."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch

from lightning_cls.training.resume import check_compatible, resolve_ckpt_path

HERE = Path(__file__).parent


def _wait_for(path: Path, proc, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"child exited early:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path.name} never appeared")
        time.sleep(0.02)


def _train_and_kill(out: Path, kind: str, moment: str, fork_server, fork_env) -> None:
    """Run crash_child.py forked from the pre-imported server (no import time) and SIGKILL
    it at ``moment``."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [str(HERE / "crash_child.py"), str(out), kind]
    log = out / "child.stderr"
    with open(log, "w") as stderr, open(os.devnull, "w") as devnull:
        proc = fork_server.popen(argv, out, fork_env, devnull, stderr)
        try:
            # The 3rd save overwrites an existing last.ckpt; kill inside it, or between steps.
            _wait_for(out / ("saving-3" if moment == "mid_save" else "step-3"), proc, log)
            time.sleep(0.1)
        finally:
            proc.kill()
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.slow  # a training process per case
@pytest.mark.parametrize("moment", ["mid_save", "mid_training"])
def test_killed_run_leaves_a_loadable_last_ckpt_and_resumes(
    tmp_path, moment, tiny_data, tiny_module, tiny_trainer, fork_server, fork_env
):
    _train_and_kill(tmp_path, "atomic", moment, fork_server, fork_env)
    if moment == "mid_save":  # the kill hit the write: its temp file is left half-written
        assert list((tmp_path / "ckpt").glob(".last.ckpt.*.tmp"))
    last = resolve_ckpt_path("last", tmp_path / "ckpt")
    ckpt = torch.load(last, weights_only=True)
    assert ckpt["global_step"] >= 2
    data = tiny_data()
    module = tiny_module(data)
    check_compatible(last, module)
    trainer = tiny_trainer(max_epochs=100, max_steps=ckpt["global_step"] + 3, limit_val_batches=0)
    trainer.fit(module, datamodule=data, ckpt_path=last)
    assert trainer.global_step == ckpt["global_step"] + 3


@pytest.mark.slow
def test_plain_model_checkpoint_is_corrupted_by_the_same_kill(tmp_path, fork_server, fork_env):
    """Proves the kill lands mid-write: Lightning's own writer (patched slow) breaks."""
    _train_and_kill(tmp_path, "plain", "mid_save", fork_server, fork_env)
    # torch.load's zip reader raises OSError (EINVAL) or RuntimeError depending on the cut.
    with pytest.raises((OSError, RuntimeError)):
        torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
