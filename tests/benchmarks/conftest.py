"""Run a benchmark script's ``--quick`` mode in a subprocess and parse its last output line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def run_quick():
    def run(script: str, *args: str, cwd: Path | None = None, timeout: int = 300) -> dict:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        proc = subprocess.run(
            [sys.executable, str(BENCHMARKS / script), "--quick", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=cwd,
        )
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
