"""A Python that has imported torch, Lightning and Hydra once and forks per command.

Each ``python -m lightning_cls.X`` of a docs page used to start a fresh interpreter and import
torch, Lightning, torchmetrics and Hydra again (6-10 s a command on the 2-core machine). The
server (``python fork_server.py SOCKET MODULE...``) imports MODULEs, then waits on a Unix socket.
For each request (sent by ``fork_client.py``) it forks; the child takes the caller's own stdin,
stdout and stderr (passed as open files), folder, environment and umask, puts the folder first
on ``sys.path``, and runs the module exactly as ``python -m`` does (``runpy._run_module_as_main``
in a new ``__main__``), or a script as ``python script.py`` does. The child then ends like a fresh
interpreter (non-daemon threads joined, atexit handlers, exit code, traceback on stderr); the
server sends its wait status back and forwards the caller's signals to it.

``fork_runner.ForkServer`` starts a server and writes a ``python`` shim for a block's PATH: it
sends ``python -m lightning_cls.*`` here and runs everything else (``python -c``, scripts, other
flags) in a real interpreter, as does the client whenever the server answers "fresh":
- the module is already imported in the server (running it as ``__main__`` would run it twice);
- an environment variable read when a library loads (PYTHON*, OMP_*, MKL_*, ...) differs from
  the server's (``OMP_NUM_THREADS=4 python -m ...`` gets a fresh interpreter with 4 threads);
- a project file the server imported was edited since it started (its copy is stale);
- the server has more than one thread after its imports: a fork copies only the forking
  thread, so a lock held by another (torch's intra-op pool, a logging handler) would stay
  held in the child. The server imports but never runs a torch op, and counts its threads.

Left different from a fresh interpreter, knowingly: the modules imported here are in
``sys.modules`` before the command starts (a check of what a command imports needs a
``fresh="true"`` block), and every child shares the server's ``hash()`` seed.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import socket
import struct
import sys

# Read by libraries when they load (or by the interpreter at start), so they must match.
IMPORT_TIME_ENV = re.compile(
    r"^(PYTHON|OMP_|MKL_|KMP_|GOMP_|OPENBLAS_|CUDA_|NVIDIA_|TORCH|PYTORCH_|LD_|MALLOC_|ORT_)"
)


def import_time_env(env: dict) -> dict:
    return {k: v for k, v in env.items() if IMPORT_TIME_ENV.match(k)}


class Job:
    """One request, run in the forked child."""

    def __init__(self, argv: list[str], cwd: str, env: dict, umask: int, fds: dict):
        self.argv, self.cwd, self.env, self.umask, self.fds = argv, cwd, env, umask, fds

    def fresh_reason(self, server_env: dict, set_by_imports: dict) -> str | None:
        """Why this command needs a fresh interpreter, or None. ``server_env``: the server's
        import-time variables when it started; ``set_by_imports``: what its imports set."""
        if len(self.argv) >= 2 and self.argv[0] == "-m":
            name = self.argv[1]
            package = hasattr(sys.modules.get(name), "__path__")  # -m runs its __main__
            main = f"{name}.__main__" if package else name
            if main in sys.modules:
                return f"{main} is imported in the server"
        elif not self.argv or self.argv[0].startswith("-"):
            return f"not 'python -m MODULE' or 'python SCRIPT': {self.argv[:2]}"
        env = import_time_env(self.env)
        env = {k: v for k, v in env.items() if set_by_imports.get(k) != v}
        differ = sorted(k for k in set(env) | set(server_env) if env.get(k) != server_env.get(k))
        if differ:
            return f"import-time environment variables differ: {', '.join(differ)}"
        return None

    def take_over_process(self, set_by_imports: dict) -> None:
        """Become the caller's process: its std files, folder, environment (plus what the
        server's imports set, as they would have in a fresh one), umask."""
        for target, fd in self.fds.items():
            if fd != target:
                os.dup2(fd, target)
                os.close(fd)
        for target in {0, 1, 2} - set(self.fds):
            os.close(target)
        os.chdir(self.cwd)
        os.umask(self.umask)
        os.environ.clear()
        os.environ.update({**set_by_imports, **self.env})
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # A fresh interpreter's stdout is line-buffered on a terminal only.
        if not sys.stdout.write_through:
            sys.stdout.reconfigure(line_buffering=os.isatty(1))
        # A fresh process seeds numpy and torch from the OS (`random` re-seeds by itself).
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        if "torch" in sys.modules:
            sys.modules["torch"].seed()

    def run(self) -> None:
        """Run the command as ``python ARGV`` would, in a new ``__main__``."""
        import runpy
        import types

        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        if self.argv[0] == "-m":
            sys.argv = ["-m", *self.argv[2:]]
            sys.path[0] = self.cwd
            # What `python -m` itself calls (a fresh __main__, argv[0], "No module named" exit).
            runpy._run_module_as_main(self.argv[1], alter_argv=True)
            return
        script = self.argv[0]
        sys.argv = list(self.argv)
        sys.path[0] = os.path.dirname(os.path.realpath(script))
        main.__file__ = script
        with open(script, "rb") as f:
            code = compile(f.read(), script, "exec")
        exec(code, main.__dict__)


class Server:
    def __init__(self, sock_path: str, modules: list[str]):
        import gc
        import importlib

        started = dict(os.environ)
        for name in modules:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
        self.threads = len(os.listdir("/proc/self/task"))
        self.env = import_time_env(started)
        # e.g. torchvision sets TORCHINDUCTOR_CACHE_DIR, Lightning PYTORCH_NVML_BASED_CUDA_CHECK
        self.set_by_imports = {k: v for k, v in os.environ.items() if started.get(k) != v}
        self.sources = _project_sources()
        self.log = open(f"{sock_path}.log", "a", buffering=1)  # noqa: SIM115 - lives as long as the server
        gc.freeze()  # keep the imported objects' pages shared with the children
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(sock_path)
        self.listener.listen(32)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, ("accept", None))
        # stdin is a pipe from the test process that started the server: EOF = it is gone.
        self.selector.register(sys.stdin, selectors.EVENT_READ, ("parent", None))
        self.jobs: dict[int, tuple[socket.socket, int]] = {}  # pid -> (connection, pidfd)

    def serve(self) -> Job:
        """Answer requests forever; returns only in a forked child, with its job."""
        while True:
            for key, _ in self.selector.select():
                kind, pid = key.data
                if kind == "accept":
                    job = self._accept()
                    if job is not None:
                        return job
                elif kind == "parent":
                    self._orphaned()
                elif kind == "exited":
                    self._finish(pid)
                else:
                    self._message(pid)

    def _accept(self) -> Job | None:
        conn, _ = self.listener.accept()
        fds, request = [], {}
        try:
            _, fds, _, _ = socket.recv_fds(conn, 1, 3)
            (size,) = struct.unpack("!I", _recv_exact(conn, 4))
            request = json.loads(_recv_exact(conn, size))
            job = Job(request["argv"], request["cwd"], request["env"], request["umask"],
                      dict(zip(request["fds"], fds)))  # fmt: skip
            reason = job.fresh_reason(self.env, self.set_by_imports) or self._stale()
            reason = reason if self.threads == 1 else f"{self.threads} threads in the server"
        except (OSError, ValueError, KeyError) as err:
            reason = f"bad request: {err}"
        self.log.write(f"{'fresh: ' + reason if reason else 'fork'} | {request.get('argv')}\n")
        if reason is not None:
            _close(fds)
            _send(conn, f"F {reason}")
            conn.close()
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._close_all()
            job.take_over_process(self.set_by_imports)
            return job
        _close(fds)
        pidfd = os.pidfd_open(pid)
        self.jobs[pid] = (conn, pidfd)
        self.selector.register(pidfd, selectors.EVENT_READ, ("exited", pid))
        self.selector.register(conn, selectors.EVENT_READ, ("message", pid))
        _send(conn, f"P {pid}")
        return None

    def _message(self, pid: int) -> None:
        """A signal to forward ("K 15"), or the caller went away: then the command goes too.
        A command reaped earlier in the same select() round (it ended as its caller wrote) is
        gone, and so is its connection: nothing to do."""
        if pid not in self.jobs:
            return
        conn, _ = self.jobs[pid]
        try:
            data = conn.recv(256).decode()
        except OSError:
            data = ""
        if not data:
            self.selector.unregister(conn)
            _kill(pid, signal.SIGKILL)
            return
        for line in data.split("\n"):
            if line.startswith("K "):
                _kill(pid, int(line[2:]))

    def _finish(self, pid: int) -> None:
        conn, pidfd = self.jobs.pop(pid)
        _, status = os.waitpid(pid, 0)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        try:
            self.selector.unregister(conn)
        except KeyError:
            pass
        _send(conn, f"X {status}")
        conn.close()

    def _stale(self) -> str | None:
        """A project file imported here was edited since: a fresh interpreter would read the new
        one (and a new module importing it would meet the old one here)."""
        changed = [path for path, mtime in self.sources.items() if _mtime(path) != mtime]
        return f"edited since the server started: {changed[0]}" if changed else None

    def _orphaned(self) -> None:
        """The test process died without stopping the server: take its commands along."""
        for pid in self.jobs:
            _kill(pid, signal.SIGKILL)
        os._exit(0)

    def _close_all(self) -> None:
        """In the child: let go of the server's socket and of every other caller."""
        self.selector.close()
        self.listener.close()
        self.log.close()
        for conn, pidfd in self.jobs.values():
            conn.close()
            os.close(pidfd)


def _project_sources() -> dict[str, float]:
    """mtime of every imported module file outside the interpreter and its site-packages."""
    installed = (sys.prefix, sys.base_prefix)
    sources = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None) or ""
        site = "site-packages" in path or "dist-packages" in path
        if os.path.isabs(path) and not site and not path.startswith(installed):
            sources[path] = _mtime(path)
    return sources


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ValueError("request cut short")
        data += chunk
    return data


def _send(conn: socket.socket, line: str) -> None:
    try:
        conn.sendall(line.encode() + b"\n")
    except OSError:
        pass  # the caller is gone


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def main(argv: list[str]) -> None:
    server = Server(argv[1], argv[2:])
    print(f"ready threads={server.threads}", flush=True)
    job = server.serve()
    job.run()


if __name__ == "__main__":
    main(sys.argv)
