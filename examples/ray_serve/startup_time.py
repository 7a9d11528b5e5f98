"""How long a local Ray instance takes to serve ``app.py`` and answer one request.

    python examples/ray_serve/startup_time.py path/to/model.onnx

Prints the seconds spent importing Ray and starting it, deploying the application, answering
the first request and shutting down (the numbers in docs/guides/cluster-serving.md).
"""

from __future__ import annotations

import argparse
import io
import socket
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", help="a lightning_cls model file (.onnx, .ckpt, ...)")
    args = parser.parse_args()
    t0 = time.perf_counter()
    import httpx
    import numpy as np
    import ray
    from PIL import Image
    from ray import serve

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"working_dir": str(HERE)},
    )
    t1 = time.perf_counter()
    from app import app_builder  # this folder is the script's own, so it is on sys.path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(app_builder({"artifact": str(Path(args.artifact).resolve())}), route_prefix="/")
    t2 = time.perf_counter()
    buf = io.BytesIO()
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(buf, format="PNG")
    answer = httpx.post(f"http://127.0.0.1:{port}/", content=buf.getvalue(), timeout=120)
    t3 = time.perf_counter()
    serve.shutdown()
    ray.shutdown()
    t4 = time.perf_counter()
    print(f"status {answer.status_code}: {answer.text[:80]}")
    print(
        f"import+ray.init {t1 - t0:.1f} s, serve.run {t2 - t1:.1f} s, first request "
        f"{t3 - t2:.2f} s, shutdown {t4 - t3:.1f} s, total {t4 - t0:.1f} s"
    )


if __name__ == "__main__":
    main()
