"""Run ``python -m lightning_cls.train`` in a subprocess on digits, CPU, small and quiet, and
read back what it wrote: shared by the preemption, SLURM and torchrun tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Two short epochs of digits (21 steps each at batch 64), no plots, no per-step output.
SMALL = [
    "trainer.max_epochs=2",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "trainer.deterministic=true",
    "~callbacks.progress_bar",
    "~callbacks.model_summary",
    "~callbacks.plots",
    "~callbacks.model_weights",
    "prediction_mosaic=false",
]
# What results.json must hold identically for two runs to count as the same training.
COMPARED = ("val", "test", "best_val_acc", "objective")


def env(**extra: str) -> dict[str, str]:
    """The test process's environment, one thread, this folder importable (SignalAt)."""
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    base = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR",)}
    return {**base, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, **extra}


def train_command(run_dir: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "lightning_cls.train",
        f"hydra.run.dir={run_dir}",
        f"paths.root_dir={run_dir.parent}",
        *SMALL,
        *overrides,
    ]


def train(run_dir: Path, *overrides: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Train in a subprocess; its log and errors together in ``.stdout``."""
    return subprocess.run(
        train_command(run_dir, *overrides),
        cwd=run_dir.parent,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


def train_forked(
    fork_server, fork_env: dict, run_dir: Path, *overrides: str, timeout: int = 300
) -> subprocess.CompletedProcess:
    """``train`` forked from the session's pre-imported server (tests/helpers/fork_server.py):
    no ~8 s of imports, no seconds of interpreter shutdown. The test callbacks are linked into
    the command's folder, ``sys.path[0]`` of ``python -m`` (a PYTHONPATH of its own would make
    the server start a fresh interpreter)."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    for name in ("signal_at.py", "pause_at.py"):
        if not (run_dir.parent / name).exists():
            (run_dir.parent / name).symlink_to(HERE / name)
    argv = train_command(run_dir, *overrides)[1:]
    return fork_server.run(argv, run_dir.parent, fork_env, timeout, merge_stderr=True)


def fake_scontrol(folder: Path) -> dict:
    """The environment of SLURM batch job 4711 whose ``scontrol`` (first on PATH) appends its
    arguments to ``folder/calls``: the requeue call, checked without SLURM."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{folder / "calls"}"\n')
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": "4711"}


def results(run_dir: Path) -> dict:
    """The compared part of a run's results.json."""
    summary = json.loads((Path(run_dir) / "results.json").read_text())
    return {key: summary[key] for key in COMPARED}
