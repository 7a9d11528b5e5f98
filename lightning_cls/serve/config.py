"""``ServeConfig``: every serving option, checked once (mirrors ``conf/serve/default.yaml``).

The defaults come from ``benchmarks/serve_load.py`` on a 2-core CPU (docs/serving.md).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lightning_cls.inference.threads import available_cores

log = logging.getLogger(__name__)

HOSTS = ("127.0.0.1", "0.0.0.0", "::")
ENGINES = ("asgi",)
MAX_WORKERS = 64


@dataclass
class ServeConfig:
    artifact: str
    model_name: str | None = None  # bare weights only: the registry name
    spec: dict[str, Any] = field(default_factory=dict)  # InputSpec keys filling the artifact's
    # "asgi": one process per worker, uvicorn + an asyncio batcher + one inference thread.
    # LitServe ("litserve") was measured and removed (docs/serving.md, "Why not LitServe").
    engine: str = "asgi"
    host: str = "127.0.0.1"
    port: int = 8000
    # The Open Inference Protocol over gRPC on this port too (grpc_oip.py, the grpc extra);
    # None: HTTP only.
    grpc_port: int | None = None
    workers: int = 1  # independent server processes sharing the port (SO_REUSEPORT)
    threads: int | None = None  # intra-op threads per worker; default cores // workers
    max_batch_size: int = 32  # images per model call (a long request is split)
    # Seconds to wait for more requests before a model call when idle; 0: no wait.
    batch_timeout: float = 0.0
    timeout: float = 10.0  # a request not answered this many seconds after admission: 504
    max_queue: int = 256  # admitted requests per worker beyond this: 503 + Retry-After
    retry_after_s: int = 1
    max_body_bytes: int = 10_000_000
    body_timeout_s: float = 10.0  # the whole body must arrive within this: else 408
    max_images_per_request: int = 64
    max_pixels: int = 36_000_000  # width x height per image, read from its header: else 413
    # width x height summed over a request's images, from their headers: else 413 (the decode
    # work one request may ask for: 64 images just under max_pixels took tens of seconds)
    max_request_pixels: int = 64_000_000
    header_timeout_s: float = 10.0  # a request's headers not in within this: 408, closed
    keep_alive_s: float = 5.0  # an idle keep-alive connection is closed after this
    max_connections: int = 1000  # open connections per worker; more are answered 503, closed
    top_k: int = 5
    drain_s: float = 10.0  # SIGTERM: finish admitted requests, exit within this
    accelerator: str = "cpu"  # device of the PyTorch kinds (.ckpt, weights, .pt2, TorchScript)
    ort_spinning: bool = False  # ONNX Runtime's intra-op threads spin between calls
    trust_artifact: bool = False  # load .pt2/TorchScript (they can run code when loaded)
    api_path: str = "/predict"
    log_level: str = "warning"

    def __post_init__(self):
        self.spec = dict(self.spec or {})
        # Imported here: `serve --help` imports this module and needs no inference package.
        from lightning_cls.inference.flags import check_trust_flag

        # A real boolean only: Hydra reads trust_artifact=no as "no", which bool() trusts.
        self.trust_artifact = check_trust_flag("trust_artifact", self.trust_artifact)
        if self.engine not in ENGINES:
            raise ValueError(
                f"serve.engine={self.engine!r}; use one of {', '.join(ENGINES)} (LitServe was "
                "removed: see docs/serving.md, 'Why not LitServe')."
            )
        if self.host not in HOSTS:
            raise ValueError(
                f"serve.host={self.host!r}; use one of {', '.join(HOSTS)} "
                "(127.0.0.1: this machine only, the default)."
            )
        if not 1024 <= int(self.port) <= 65535:
            raise ValueError(f"serve.port={self.port} must be in 1024..65535.")
        if self.grpc_port is not None and (
            not isinstance(self.grpc_port, int)
            or isinstance(self.grpc_port, bool)
            or not 1024 <= self.grpc_port <= 65535
            or self.grpc_port == self.port
        ):
            raise ValueError(
                f"serve.grpc_port={self.grpc_port!r} must be a port in 1024..65535 other than "
                f"serve.port={self.port}, or null (no gRPC)."
            )
        for key in (
            "workers",
            "max_batch_size",
            "max_queue",
            "max_body_bytes",
            "max_images_per_request",
            "max_pixels",
            "max_request_pixels",
            "max_connections",
            "top_k",
            "retry_after_s",
        ):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"serve.{key}={value!r} must be an integer >= 1.")
        for key in ("timeout", "body_timeout_s", "header_timeout_s", "keep_alive_s", "drain_s"):
            if not getattr(self, key) > 0:
                raise ValueError(f"serve.{key}={getattr(self, key)!r} must be > 0 seconds.")
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

    def public(self) -> dict[str, Any]:
        """The settings for ``/info``: the artifact by file name only (no machine paths)."""
        return {**asdict(self), "artifact": Path(self.artifact).name}
