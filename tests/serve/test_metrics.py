"""``ServeMetrics.close``: a server process leaves through ``os._exit`` (``server.exit_now``),
which runs no finalizer; the counters' spawn-context semaphores must be unlinked before, or the
resource tracker warns of 'leaked semaphore objects' at every SIGTERM."""

from __future__ import annotations

import subprocess
import sys

import pytest

EXIT = """
import os, sys
from lightning_cls.serve.metrics import ServeMetrics
metrics = ServeMetrics()
metrics.observe_request(200, 0.01)
if sys.argv[1] == "close":
    metrics.close()
os._exit(0)
"""


@pytest.mark.parametrize("close", [True, False])
def test_closed_metrics_leave_no_semaphore_behind_an_os_exit(close):
    argv = [sys.executable, "-c", EXIT, "close" if close else "keep"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # the tracker process writes its warning to the stderr it shares, before the pipe closes
    leaked = "leaked semaphore objects" in done.stderr
    assert leaked is not close, done.stderr  # without close(): the warning (the control)
