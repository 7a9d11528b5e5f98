"""``serve``: run the ASGI engine in this process, or in ``serve.workers`` processes.

One worker: this process loads the model, warms it up, binds the port and runs uvicorn
(uvloop and httptools when installed). N workers: this process checks the artifact and the
port, then spawns N independent server processes that each bind the port with
``SO_REUSEPORT`` (the kernel spreads connections; nothing passes between them) and each
exits when this parent dies (``PR_SET_PDEATHSIG`` on Linux, a watchdog thread elsewhere).

SIGTERM (or Ctrl+C): ``/health`` and new ``/predict`` requests get 503 at once, admitted
requests are answered, and the process exits within ``serve.drain_s``; a second signal exits
at once.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import multiprocessing as mp
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import uvicorn

from lightning_cls.inference.predictor import Predictor, load_artifact
from lightning_cls.serve.app import ServeApp
from lightning_cls.serve.batcher import warm_up
from lightning_cls.serve.config import ServeConfig
from lightning_cls.serve.connections import guarded_protocol
from lightning_cls.serve.metrics import ServeMetrics

log = logging.getLogger(__name__)


def load_predictor(config: ServeConfig, threads: int) -> Predictor:
    """The artifact as a ``Predictor`` with ``threads`` intra-op threads."""
    from lightning_cls.inference.runtimes import runtime_for

    if runtime_for(Path(config.artifact)).arrays == "torch":  # ONNX, OpenVINO: no torch at all
        import torch

        torch.set_num_threads(threads)  # PyTorch's pool is process-wide; ORT's is per session
    predictor = load_artifact(
        config.artifact,
        model_name=config.model_name,
        spec=config.spec,
        threads=threads,
        device=config.accelerator,
        trust_artifact=config.trust_artifact,  # trust_artifact=true: the key predict's too
    )
    if predictor.kind == "onnx" and threads > 1:
        # ORT's intra-op threads spin after each call by default (burning the cores the event
        # loop needs); serve.ort_spinning, chosen by benchmarks/serve_load.py, decides.
        from lightning_cls.inference.runtimes import make_session

        predictor.runtime.session = make_session(
            config.artifact, threads, spinning=config.ort_spinning
        )
    return predictor


def model_info(config: ServeConfig, predictor: Predictor) -> dict:
    return {
        "name": predictor.spec.model_name or Path(config.artifact).stem,
        "version": _file_digest(config.artifact),
        "runtime": predictor.kind,
        "artifact": Path(config.artifact).name,
    }


class DrainingServer(uvicorn.Server):
    """uvicorn that, on the first SIGTERM/SIGINT, answers 503 to ``/health`` and new requests,
    waits for admitted ones, then shuts down; uvicorn's ``handle_exit`` is its documented
    signal hook."""

    def __init__(self, config: uvicorn.Config, app: ServeApp, drain_s: float, grpc=None):
        super().__init__(config)
        self.app, self.drain_s = app, drain_s
        self.grpc = grpc  # serve.grpc_port's server (grpc_oip.py), on this event loop

    async def startup(self, sockets=None) -> None:
        if self.grpc is not None:  # before HTTP: /health answering means both are open
            await self.grpc.start()
        await super().startup(sockets)

    async def shutdown(self, sockets=None) -> None:
        if self.grpc is not None:  # drained (_drain) by now: admission is shared
            await self.grpc.stop(self.config.timeout_graceful_shutdown)
        await super().shutdown(sockets)

    def handle_exit(self, sig, frame) -> None:
        if self.app.draining:  # a second signal: stop now
            self.force_exit = True
            return super().handle_exit(sig, frame)
        self.app.draining = True
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        deadline = time.monotonic() + self.drain_s - self.config.timeout_graceful_shutdown
        while self.app.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        self.should_exit = True  # uvicorn closes the sockets, then waits for open requests


def run_worker(config: ServeConfig, metrics: ServeMetrics, reuse_port: bool) -> None:
    """One server process: load, warm up, bind, serve until drained."""
    predictor = load_predictor(config, config.threads)
    warm_up(predictor, config.max_batch_size)
    app = ServeApp(config, predictor, metrics, model_info(config, predictor))
    sock = bind(config.host, config.port, reuse_port)
    _descriptors_for(config.max_connections)
    uv_config = uvicorn.Config(
        app,
        # the header timeout and connection cap uvicorn lacks (connections.py)
        http=guarded_protocol(
            config.header_timeout_s, config.max_connections, config.retry_after_s
        ),
        timeout_keep_alive=config.keep_alive_s,
        lifespan="off",
        access_log=False,
        log_level=config.log_level,
        timeout_graceful_shutdown=min(1.0, config.drain_s / 2),
    )
    grpc = None
    if config.grpc_port is not None:
        from lightning_cls.serve.grpc_oip import GrpcServer

        grpc = GrpcServer(app, config)
    server = DrainingServer(uv_config, app, config.drain_s, grpc)
    metrics.worker_ready(os.getpid())
    log.info(
        "Serving %s on http://%s:%d (pid %d)", predictor, config.host, config.port, os.getpid()
    )
    if grpc is not None:
        log.info("and over gRPC on %s:%d", config.host, config.grpc_port)
    try:
        server.run(sockets=[sock])
    finally:
        app.close()


def _descriptors_for(max_connections: int, spare: int = 256) -> None:
    """Raise this process's soft open-file limit to hold ``max_connections`` sockets beside
    the model's and the runtimes' files; a warning when the hard limit is lower."""
    try:
        import resource
    except ImportError:  # not POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max_connections + spare
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    if new < wanted:
        log.warning(
            "serve.max_connections=%d needs about %d file descriptors; the limit is %d "
            "(ulimit -n): lower serve.max_connections or raise the limit",
            max_connections,
            wanted,
            new,
        )


def bind(host: str, port: int, reuse_port: bool, key: str = "serve.port") -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise ValueError(
            f"{key}={port} on {host} cannot be bound ({err.strerror}); "
            f"stop what uses it or choose another {key}."
        ) from err
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(config: ServeConfig) -> None:
    """Serve until SIGTERM/Ctrl+C (see the module docstring)."""
    metrics = ServeMetrics()
    try:
        _serve(config, metrics)
    finally:
        metrics.close()  # the process leaves through os._exit (exit_now): no finalizers


def _serve(config: ServeConfig, metrics: ServeMetrics) -> None:
    if config.grpc_port is not None:  # fail here, in one line: no grpcio, or the port taken
        import lightning_cls.serve.grpc_oip  # noqa: F401

        bind(config.host, config.grpc_port, reuse_port=False, key="serve.grpc_port").close()
    if config.workers == 1:
        return run_worker(config, metrics, reuse_port=False)
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ValueError("serve.workers > 1 needs SO_REUSEPORT (Linux, macOS); use 1 here.")
    load_predictor(config, 1)  # fail here, in one line, on a bad artifact
    bind(config.host, config.port, reuse_port=False).close()  # fail here if the port is taken
    ctx = mp.get_context("spawn")
    workers = [
        ctx.Process(
            target=_worker_main,
            args=(config, metrics, os.getpid()),
            name=f"lightning_cls-serve-{i}",
        )
        for i in range(config.workers)
    ]
    stopping = threading.Event()

    def stop(signum, frame):
        stopping.set()
        for worker in workers:
            if worker.pid and worker.is_alive():
                os.kill(worker.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for worker in workers:
        worker.start()
    while not stopping.is_set():
        if any(w.exitcode not in (None, 0) for w in workers):  # one died: take the rest down
            log.error("A server process exited (%s); stopping", [w.exitcode for w in workers])
            stop(signal.SIGTERM, None)
            break
        if all(w.exitcode is not None for w in workers):
            break
        stopping.wait(0.2)
    deadline = time.monotonic() + config.drain_s + 2
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            worker.kill()
            worker.join()
    if any(w.exitcode for w in workers):
        sys.exit(1)


def _worker_main(config: ServeConfig, metrics: ServeMetrics, parent: int) -> None:
    _exit_with_parent(parent)
    logging.basicConfig(level=config.log_level.upper(), format="[%(process)d] %(message)s")
    run_worker(config, metrics, reuse_port=True)
    exit_now()


def exit_now(code: int = 0) -> None:
    """Leave a drained server process without the interpreter's teardown: its final garbage
    collection over the model's and the runtimes' objects took seconds on a loaded 2-core
    machine, past ``serve.drain_s`` (tests/serve/test_hardening.py). Everything the process
    owns is closed by then; logs are flushed first."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _exit_with_parent(parent: int) -> None:
    """SIGTERM this process (it drains, then exits) when ``parent`` dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        if libc.prctl(pr_set_pdeathsig, signal.SIGTERM) != 0:
            raise OSError(ctypes.get_errno(), "prctl failed")
    except (OSError, AttributeError):  # not Linux: a watchdog thread instead

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=watch, daemon=True, name="lightning_cls-watchdog").start()
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _file_digest(path: str | Path, length: int = 12) -> str:
    """The model version: the first hex digits of the artifact's SHA-256."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:length]
