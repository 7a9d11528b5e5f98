"""Run a benchmark script's ``--quick`` mode in a forked child and parse its last output line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


# Run in a fresh interpreter: startup.py reads its children's peak RSS from wait4, and Linux
# counts the parent's memory at exec in it (a driver forked from the ~500 MB server made a 30 MB
# `train --help` read 480 MB).
FRESH = {"startup.py"}


@pytest.fixture
def run_quick(fork_server, fork_env):
    """``python benchmarks/SCRIPT --quick ARGS``, forked from the pre-imported server
    (tests/conftest.py) unless in FRESH, so the script does not pay torch's and Lightning's
    imports."""

    def run(script: str, *args: str, cwd: Path | None = None, timeout: int = 300) -> dict:
        argv = [str(BENCHMARKS / script), "--quick", *args]
        if script in FRESH:
            proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                                  timeout=timeout, env=fork_env, cwd=cwd)  # fmt: skip
        else:  # the commands a script starts with $BENCH_PYTHON are forked too
            env = {**fork_env, "BENCH_PYTHON": str(fork_server.bin / "python")}
            proc = fork_server.run(argv, cwd or Path.cwd(), env, timeout=timeout)
        assert proc.returncode == 0, proc.stderr[-3000:]
        last = proc.stdout.strip().splitlines()[-1]
        return json.loads(last)

    return run


@pytest.fixture
def benchmark_module(monkeypatch):
    """Import a sibling module of benchmarks/ (they import each other as top-level modules)."""
    import importlib

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module
