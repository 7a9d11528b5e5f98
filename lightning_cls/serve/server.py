"""``ServeConfig`` and ``serve``: a LitServe server for one artifact, with limits, metrics and a
graceful SIGTERM drain. ``python -m lightning_cls.serve`` builds a ``ServeConfig`` from Hydra.

Endpoints: ``POST /predict`` (raw ``image/*`` bytes, or JSON ``{"image": b64}`` /
``{"images": [b64, ...]}`` with optional ``"top_k"``), ``GET /health`` (200 once every worker
loaded and warmed up its model; 503 while starting or draining), ``GET /info`` (model, input
spec, runtime, batching and limits), ``GET /metrics`` (Prometheus text).
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing as mp
import os
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import litserve as ls
from fastapi.responses import PlainTextResponse

from lightning_cls.inference.predictor import load_artifact
from lightning_cls.serve.api import ClassifierAPI
from lightning_cls.serve.gate import RequestGate
from lightning_cls.serve.metrics import MAX_WORKERS, ServeMetrics
from lightning_cls.threads import available_cores

log = logging.getLogger(__name__)

HOSTS = ("127.0.0.1", "0.0.0.0", "::")  # what LitServer.run accepts
BATCH_LOOPS = ("blocking", "litserve")  # serve.batch_loop


@dataclass
class ServeConfig:
    """Every serving option (mirrors ``conf/serve/default.yaml``; defaults from the benchmark)."""

    artifact: str
    model_name: str | None = None  # bare weights only: the registry name
    spec: dict[str, Any] = field(default_factory=dict)  # InputSpec keys filling the artifact's
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1  # inference processes
    threads: int | None = None  # per worker; default cores // workers
    max_batch_size: int = 32
    # Seconds to wait for more requests after the first; 0: what is queued (benchmark's pick).
    batch_timeout: float = 0.0
    timeout: float = 10.0  # a request older than this gets 504
    max_queue: int = 256  # requests in flight beyond this get 503 + Retry-After
    retry_after_s: int = 1
    max_body_bytes: int = 10_000_000
    max_images_per_request: int = 64
    top_k: int = 5
    accelerator: str = "cpu"
    fast_queue: bool = True  # LitServe's ZeroMQ response transport (its advice above ~100 req/s)
    # Batch collector: "blocking" (lightning_cls.serve.loop, waits while idle) or "litserve"
    # (LitServe's own, which polls its queue every millisecond).
    batch_loop: str = "blocking"
    api_path: str = "/predict"
    log_level: str = "warning"

    def __post_init__(self):
        self.spec = dict(self.spec or {})
        if self.host not in HOSTS:
            raise ValueError(
                f"serve.host={self.host!r}; use one of {', '.join(HOSTS)} "
                "(127.0.0.1: this machine only, the default)."
            )
        if not 1024 <= int(self.port) <= 65535:
            raise ValueError(f"serve.port={self.port} must be in 1024..65535.")
        for key in (
            "workers",
            "max_batch_size",
            "max_queue",
            "max_body_bytes",
            "max_images_per_request",
            "top_k",
            "retry_after_s",
        ):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise ValueError(f"serve.{key}={getattr(self, key)!r} must be an integer >= 1.")
        if self.batch_loop not in BATCH_LOOPS:
            raise ValueError(
                f"serve.batch_loop={self.batch_loop!r}; use one of {', '.join(BATCH_LOOPS)}."
            )
        if self.batch_loop == "litserve" and self.batch_timeout == 0 and self.max_batch_size > 1:
            log.warning(
                "serve.batch_loop=litserve with serve.batch_timeout=0 polls the request queue "
                "without pause (a busy core while idle); set serve.batch_timeout=0.002."
            )
        if self.workers > MAX_WORKERS:
            raise ValueError(f"serve.workers={self.workers} exceeds {MAX_WORKERS}.")
        if not 0 <= self.batch_timeout < self.timeout:
            raise ValueError(
                f"serve.batch_timeout={self.batch_timeout} must be >= 0 and below "
                f"serve.timeout={self.timeout}."
            )
        cores = available_cores()
        if self.threads is None:
            self.threads = max(1, cores // self.workers)
        elif self.threads * self.workers > cores:
            raise ValueError(
                f"serve.threads={self.threads} x serve.workers={self.workers} oversubscribes the "
                f"{cores} available cores; set serve.threads={max(1, cores // self.workers)} or "
                "leave it null (cores // workers)."
            )


def build_server(config: ServeConfig) -> tuple[ls.LitServer, ServeMetrics]:
    """Load the artifact once here (a bad path or missing metadata fails before any worker
    starts), then wire the LitAPI, the request gate and ``/metrics`` into a ``LitServer``."""
    probe = load_artifact(config.artifact, config.model_name, config.spec, threads=1)
    spec, kind = probe.spec, probe.kind
    del probe
    info = {
        "name": spec.model_name or Path(config.artifact).stem,
        "version": _file_digest(config.artifact),
        "runtime": kind,
        "artifact": Path(config.artifact).name,
    }
    metrics = ServeMetrics()
    api = ClassifierAPI(
        config.artifact,
        spec,
        info,
        metrics,
        config.threads,
        config.max_batch_size,
        config.batch_timeout,
        config.api_path,
        config.model_name,
        batch_loop=config.batch_loop,
    )
    gate = (
        RequestGate,
        dict(
            spec=spec,
            metrics=metrics,
            api_path=config.api_path,
            max_queue=config.max_queue,
            max_body_bytes=config.max_body_bytes,
            max_images_per_request=config.max_images_per_request,
            default_top_k=config.top_k,
            retry_after_s=config.retry_after_s,
        ),
    )
    metadata = {**info, "spec": spec.to_dict(), "config": asdict(config)}
    server = ls.LitServer(
        api,
        accelerator=config.accelerator,
        workers_per_device=config.workers,
        timeout=config.timeout,
        model_metadata=metadata,
        middlewares=[gate],
        fast_queue=config.fast_queue,
    )

    async def prometheus() -> PlainTextResponse:
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    # LitServer exposes its FastAPI app; an extra route is plain FastAPI.
    server.app.add_api_route("/metrics", prometheus, methods=["GET"])
    return server, metrics


def serve(config: ServeConfig) -> None:
    """Run until SIGTERM or Ctrl+C. SIGTERM drains: requests already accepted are answered."""
    server, metrics = build_server(config)
    main_pid = os.getpid()

    def drain(signum, frame):
        if os.getpid() != main_pid:  # a forked helper (LitServe's manager) inherited this
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        log.warning("SIGTERM: draining (no new connections; answering accepted requests)")
        metrics.draining.value = 1
        # LitServe 0.2 has no SIGTERM handling of its own in the main process. Its HTTP servers
        # are uvicorn processes named "LitServer-<n>"; uvicorn's own SIGTERM handler stops
        # accepting and finishes in-flight requests (up to its graceful timeout). Once they
        # have exited, KeyboardInterrupt takes LitServer.run down its documented Ctrl+C path,
        # which stops the inference workers.
        http_servers = [p for p in mp.active_children() if p.name.startswith("LitServer-")]
        for process in http_servers:
            os.kill(process.pid, signal.SIGTERM)
        for process in http_servers:
            process.join(timeout=60)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, drain)
    log.info(
        "Serving %s on http://%s:%d%s", config.artifact, config.host, config.port, config.api_path
    )
    server.run(
        host=config.host, port=config.port, log_level=config.log_level, generate_client_file=False
    )


def _file_digest(path: str | Path, length: int = 12) -> str:
    """The model version: the first hex digits of the artifact's SHA-256."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:length]
