"""``ServerProcess``: a real ``python -m lightning_cls.serve`` on a free localhost port."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

STARTUP_S = 180  # loading torch and the model; generous for a loaded CI machine


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    def __init__(self, artifact: Path, run_dir: Path, *overrides: str, workers: int = 1):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = run_dir / "server.log"
        run_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "lightning_cls.serve",
            f"ckpt_path={artifact}",
            f"serve.port={self.port}",
            f"hydra.run.dir={run_dir}",
            f"serve.workers={workers}",
            *overrides,
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            cwd=run_dir,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        self._wait_ready(workers)

    def _wait_ready(self, workers: int = 1) -> None:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"server exited ({self.proc.returncode}):\n{self.log.read_text()}"
                )
            try:
                ready = httpx.get(self.url + "/health", timeout=2).status_code == 200
                if ready and len(self.worker_pids()) >= workers:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"server not ready after {STARTUP_S} s:\n{self.log.read_text()}")

    def worker_pids(self) -> list[int]:
        """The server processes ready to serve, from ``lightning_cls_worker_info`` in /metrics."""
        text = httpx.get(self.url + "/metrics", timeout=10).text
        return [
            int(p) for p in re.findall(r'^lightning_cls_worker_info\{pid="(\d+)"\} 1$', text, re.M)
        ]

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
