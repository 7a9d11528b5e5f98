"""How long a local Ray instance takes to serve ``app.py`` and answer one request.

    python examples/ray_serve/startup_time.py path/to/model.onnx

Prints the seconds spent importing Ray and starting it, deploying the application, answering
the first request and shutting down (the numbers in docs/guides/cluster-serving.md).
``serving(artifact)`` is the same start and stop as a context manager giving the app's URL
(tests/test_examples.py sends its requests through it).
"""

from __future__ import annotations

import argparse
import io
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent


@contextmanager
def serving(artifact: str | Path, timings: dict | None = None, **options) -> Iterator[str]:
    """Start a local Ray instance, deploy ``app.py`` for ``artifact`` (``options``: the app's
    ``key=value`` options) on a free port, yield its URL; shut Ray down on exit. ``timings``
    receives the seconds of each step."""
    timings = {} if timings is None else timings
    t0 = time.perf_counter()
    import ray
    from ray import serve

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"working_dir": str(HERE)},  # the replicas import app/batching from it
    )
    t1 = time.perf_counter()
    timings["import+ray.init"] = t1 - t0
    try:
        from app import app_builder  # this folder is the script's own, so it is on sys.path

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        args = {
            "artifact": str(Path(artifact).resolve()),
            **{k: str(v) for k, v in options.items()},
        }
        serve.run(app_builder(args), route_prefix="/")
        timings["serve.run"] = time.perf_counter() - t1
        yield f"http://127.0.0.1:{port}/"
    finally:
        t3 = time.perf_counter()
        serve.shutdown()
        ray.shutdown()
        timings["shutdown"] = time.perf_counter() - t3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", help="a lightning_cls model file (.onnx, .ckpt, ...)")
    args = parser.parse_args()
    import httpx
    import numpy as np
    from PIL import Image

    t0, timings = time.perf_counter(), {}
    with serving(args.artifact, timings) as url:
        buf = io.BytesIO()
        Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(buf, format="PNG")
        t2 = time.perf_counter()
        answer = httpx.post(url, content=buf.getvalue(), timeout=120)
        first = time.perf_counter() - t2
    print(f"status {answer.status_code}: {answer.text[:80]}")
    print(
        f"import+ray.init {timings['import+ray.init']:.1f} s, serve.run "
        f"{timings['serve.run']:.1f} s, first request {first:.2f} s, shutdown "
        f"{timings['shutdown']:.1f} s, total {time.perf_counter() - t0:.1f} s"
    )


if __name__ == "__main__":
    main()
