"""The test side of ``fork_server.py``: start a server, write the ``python`` shim that sends
``python -m lightning_cls.*`` to it, run a command line through it (``ForkServer.run``).

The server starts with ``FORK_ENV``-like settings given by the caller (tests/conftest.py); a
command whose import-time variables differ from them runs in a fresh interpreter.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVER = HERE / "fork_server.py"
CLIENT = HERE / "fork_client.py"
# What the docs' commands import; each is skipped when it is not installed.
PRELOAD = (
    "numpy",
    "PIL.Image",
    "sklearn.datasets",  # the digits; sets KMP_DUPLICATE_LIB_OK and KMP_INIT_AT_FORK
    "torch",
    "torchvision",
    "torchmetrics",
    "pytorch_lightning",
    "hydra",
    "omegaconf",
    "lightning_cls.module",
    "lightning_cls.callbacks",
    "lightning_cls.data",
    "lightning_cls.inference",
    "lightning_cls.training",
    "lightning_cls.export",
    "lightning_cls.cli",
    # The figures every training draws (curves, confusion, mosaics): ~0.5 s of imports and
    # font-list loading in each forked command otherwise. Agg is chosen before pyplot loads,
    # as the drawing code does.
    "matplotlib.backends.backend_agg",
    "matplotlib.pyplot",
    # The ONNX exporter (~1.3-2 s of CPU in each forked command that exports); a missing or
    # renamed module is skipped. Not onnxruntime: its import starts a thread, and the server
    # must fork from one thread (test_the_suite_server_forks_from_one_thread).
    "onnx",
    "onnxscript",
    "torch.onnx._internal.exporter._core",
)

SHIM = """#!/bin/sh
# Written by tests/helpers/fork_server.py: `python -m {prefix}*` runs in the pre-imported server.
case "$1" in -m) case "$2" in {prefix}*)
  exec {python} -S -E -s {client} {socket} {python} "$@";;
esac;; esac
exec {python} "$@"
"""


class Forked:
    """A command running in a forked child of the server (``ForkServer.popen``)."""

    def __init__(self, conn, pid: int):
        self.pid, self.returncode, self._conn = pid, None, conn
        self._thread = threading.Thread(target=self._wait, args=(conn,), daemon=True)
        self._thread.start()

    def _wait(self, conn) -> None:
        from helpers.fork_client import wait

        self.returncode = os.waitstatus_to_exitcode(wait(conn))

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL the command. The server sends it while the command is its unreaped child,
        so it cannot reach another process that got the pid after the command ended (as
        ``os.kill(self.pid)`` from here could); a command that has ended ignores it."""
        from helpers.fork_client import forward

        if self.returncode is None:
            forward(self._conn, signal.SIGKILL)


class ForkServer:
    """A running server, its socket, and a folder with the ``python`` shim for blocks' PATH."""

    def __init__(self, env: dict, prefix: str = "lightning_cls.", modules=PRELOAD, python=None):
        self.python = python or sys.executable
        self.dir = Path(tempfile.mkdtemp(prefix="forksrv-"))
        self.socket = str(self.dir / "socket")
        self.bin = self.dir / "bin"
        self.bin.mkdir()
        for name in ("python", "python3"):
            shim = self.bin / name
            shim.write_text(SHIM.format(prefix=prefix, python=self.python, client=CLIENT,
                                        socket=self.socket))  # fmt: skip
            shim.chmod(0o755)
        self.env = env
        self.stderr = self.dir / "server.stderr"  # the server's own errors (its children's go
        with open(self.stderr, "w") as stderr:  # to their callers' files)
            self.proc = subprocess.Popen(
                [self.python, str(SERVER), self.socket, *modules],
                env=env,
                stdin=subprocess.PIPE,  # never written: the server exits when this process does
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self.threads: int | None = None

    def wait_ready(self, timeout: float = 300) -> None:
        """Block until the server has imported its modules and listens."""
        if self.threads is not None:
            return
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                self.stop()
                raise RuntimeError(f"fork server not ready after {timeout} s")
        line = self.proc.stdout.readline()  # "ready threads=N"
        if not line.startswith("ready"):
            error = self.stderr.read_text()[-3000:]
            raise RuntimeError(
                f"fork server did not start: {line!r}, rc={self.proc.poll()}\n{error}"
            )
        self.threads = int(line.split("threads=")[1])

    def run(
        self, argv: list[str], cwd, env: dict, timeout: float, merge_stderr: bool = False
    ) -> subprocess.CompletedProcess:
        """``python ARGV`` in a forked child (a fresh interpreter when the server says so),
        output captured as ``subprocess.run(..., capture_output=True, text=True)`` does; a
        command past ``timeout`` is killed (returncode -9)."""
        from helpers.fork_client import run_in_server

        with tempfile.TemporaryDirectory() as tmp:
            out, err = Path(tmp, "out"), Path(tmp, "err")
            with open(out, "w") as o, open(err, "w") as e, open(os.devnull) as devnull:
                e = o if merge_stderr else e
                fds = [devnull.fileno(), o.fileno(), e.fileno()]
                code = run_in_server(self.socket, argv, str(cwd), env, fds, timeout)
                if code is None:
                    code = subprocess.run([self.python, *argv], cwd=cwd, env=env, stdin=devnull,
                                          stdout=o, stderr=e, timeout=timeout).returncode  # fmt: skip
            stderr = None if merge_stderr else err.read_text()
            return subprocess.CompletedProcess([self.python, *argv], code, out.read_text(), stderr)

    def popen(self, argv: list[str], cwd, env: dict, stdout, stderr):
        """Start ``python ARGV`` in a forked child without waiting; a handle with ``pid``,
        ``poll()``, ``wait(timeout)``, ``kill()`` and ``returncode`` like ``subprocess.Popen``
        (a ``Popen`` of a fresh interpreter when the server says so). ``stdout``/``stderr``:
        open files."""
        from helpers.fork_client import request

        with open(os.devnull) as devnull:
            fds = [devnull.fileno(), stdout.fileno(), stderr.fileno()]
            conn, pid = request(self.socket, argv, str(cwd), env, fds)
            if conn is None:
                return subprocess.Popen([self.python, *argv], cwd=cwd, env=env, stdin=devnull,
                                        stdout=stdout, stderr=stderr)  # fmt: skip
        return Forked(conn, pid)

    def requests(self) -> list[str]:
        """One line per request so far: "fork | argv" or "fresh: reason | argv"."""
        log = Path(f"{self.socket}.log")
        return log.read_text().splitlines() if log.exists() else []

    def path(self, env_path: str, shim: bool = True) -> str:
        """PATH for a block: the shim, then this interpreter's folder (an activated venv)."""
        return os.pathsep.join([str(self.bin)] * shim + [os.path.dirname(self.python), env_path])

    def stop(self) -> None:
        """Stop the server; an error if it had died before (every command after that ran in a
        fresh interpreter: slower, and a bug in the server), with its traceback."""
        died = self.proc.poll()
        error = self.stderr.read_text()[-3000:] if died is not None else ""
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        for path in sorted(self.dir.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        self.dir.rmdir()
        if died is not None:
            raise RuntimeError(f"the fork server had died (exit code {died}):\n{error}")
