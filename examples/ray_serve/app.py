"""A Ray Serve application around any lightning_cls artifact, with Ray's dynamic batching.

Run from this folder (a local Ray instance starts if none is running)::

    serve run app:app_builder artifact=/path/to/model.onnx max_batch_size=32
    curl --data-binary @cat.png http://127.0.0.1:8000/

Each request body is one encoded image (PNG, JPEG, ...); the answer is the top-k labels
(``{"predictions": [{"label": ..., "prob": ...}, ...]}``) or ``{"error": ...}`` with status 400.
``@serve.batch`` gathers concurrent requests of a replica into one call of ``classify_batch``
(``batching.py``), so the model runs one batch instead of many single images. Scale out with
``num_replicas`` (each replica loads the artifact once, with ``threads`` intra-op threads).
"""

from __future__ import annotations

from batching import classify_batch
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

from lightning_cls.inference import load_artifact


@serve.deployment
class Classifier:
    def __init__(
        self,
        artifact: str,
        top_k: int = 5,
        threads: int = 1,
        max_batch_size: int = 32,
        batch_wait_timeout_s: float = 0.0,
    ):
        self.predictor = load_artifact(artifact, threads=threads)
        self.top_k = top_k
        # Batching options per replica; 0 s wait: a lone request is not held back.
        self.classify.set_max_batch_size(max_batch_size)
        self.classify.set_batch_wait_timeout_s(batch_wait_timeout_s)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.0)
    async def classify(self, bodies: list[bytes]) -> list[dict]:
        return classify_batch(self.predictor, bodies, self.top_k)

    async def __call__(self, request: Request) -> JSONResponse:
        result = await self.classify(await request.body())
        return JSONResponse(result, status_code=400 if "error" in result else 200)


def app_builder(args: dict[str, str]) -> serve.Application:
    """``serve run app:app_builder artifact=... [top_k=5 threads=1 max_batch_size=32
    batch_wait_timeout_s=0 num_replicas=1]``; values arrive as strings from the command line."""
    if "artifact" not in args:
        raise ValueError("Pass the model file: serve run app:app_builder artifact=PATH.")
    replicas, batch = int(args.get("num_replicas", 1)), int(args.get("max_batch_size", 32))
    # A replica takes at most max_ongoing_requests at once (Ray's default: 5): let a full
    # batch in.
    return Classifier.options(num_replicas=replicas, max_ongoing_requests=batch).bind(
        args["artifact"],
        top_k=int(args.get("top_k", 5)),
        threads=int(args.get("threads", 1)),
        max_batch_size=batch,
        batch_wait_timeout_s=float(args.get("batch_wait_timeout_s", 0.0)),
    )
