"""``ServeApp``: the ASGI application of one server process.

``POST /predict`` and ``POST /explain`` (the heat map of one image, where the served model
supports it, ``serve/heatmaps.py``) are plain ASGI functions (no framework routing, no
per-request validation models) behind one admission, ``admit``: read the body under a
deadline, take a queue slot (503 when full), answer within ``serve.timeout`` (504), the pixel
budget checked from the headers and big images decoded off the event loop. ``/predict`` then
awaits the ``Batcher``; ``/explain`` draws in its own thread, one image at a time. Both send
pre-serialised JSON. Both take an image however it is uploaded (raw, a form, JSON:
``serve/uploads.py``); another method than POST is a 405 with ``Allow``. ``/v2/...`` is the
Open Inference Protocol (``serve/oip.py``), its ``infer`` admitted the same way. Everything else (``GET /``, ``/health``, ``/info``,
``/metrics``) goes to a small Starlette app.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from lightning_cls.inference.predictor import Predictor
from lightning_cls.serve.batcher import Batcher, Expired
from lightning_cls.serve.config import ServeConfig
from lightning_cls.serve.heatmaps import HeatMaps
from lightning_cls.serve.inputs import (
    INLINE_DECODE_PIXELS,
    Reject,
    decode_all,
    request_pixels,
    too_large,
)
from lightning_cls.serve.metrics import ServeMetrics
from lightning_cls.serve.oip import V2_PREFIX, OpenInference
from lightning_cls.serve.page import PAGE_HTML
from lightning_cls.serve.responses import dumps
from lightning_cls.serve.responses import send as _send
from lightning_cls.serve.uploads import uploaded

log = logging.getLogger(__name__)
EXPLAIN_PATH = "/explain"
# An admitted request's work: (Content-Type header, body, deadline) -> its answer (the JSON
# body; for the Open Inference Protocol, the body and the length of its JSON part).
Work = Callable[[str, bytes, float], Awaitable[Any]]


class ServeApp:
    def __init__(
        self, config: ServeConfig, predictor: Predictor, metrics: ServeMetrics, info: dict
    ):
        self.config, self.spec, self.metrics = config, predictor.spec, metrics
        self.classes = list(self.spec.classes)
        self.batcher = Batcher(
            predictor, metrics, config.max_batch_size, config.batch_timeout, config.timeout
        )
        # Decodes of big images; the model thread and these share the worker's cores.
        self.decoder = ThreadPoolExecutor(config.threads, thread_name_prefix="lightning_cls-decode")
        self.in_flight = 0  # admitted /predict and /explain requests not yet answered, here
        self.draining = False  # set on SIGTERM: /health, new /predict and /explain get 503
        self.model_json = dumps(info)  # the same for every answer: serialised once
        self.heatmaps = HeatMaps(predictor)
        # Heat maps, one at a time, beside the model thread: a queue of them waits here, not
        # in the decode threads /predict's big images need.
        self.explainer = ThreadPoolExecutor(1, thread_name_prefix="lightning_cls-explain")
        self.info = {"model": {**info, "spec": self.spec.to_dict(), "config": config.public()}}
        self.info["model"]["explain"] = self.heatmaps.describe()
        self.v2 = OpenInference(self, predictor.kind, info)  # the /v2/... endpoints
        self.routes = Starlette(
            routes=[
                Route("/", self.page),
                Route("/health", self.health),
                Route("/info", self.describe),
                Route("/metrics", self.prometheus),
            ]
        )

    async def __call__(self, scope, receive, send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path in (self.config.api_path, EXPLAIN_PATH):
            if scope["method"] != "POST":
                detail = f"{path} takes POST, not {scope['method']}; send the image in the body"
                return await _send(send, 405, dumps({"detail": detail}), {"allow": "POST"})
            if path == EXPLAIN_PATH:
                return await self.explain(scope, receive, send)
            return await self.predict(scope, receive, send)
        if scope["type"] == "http" and (path == V2_PREFIX or path.startswith(V2_PREFIX + "/")):
            return await self.v2(scope, receive, send)
        return await self.routes(scope, receive, send)

    # --- POST /predict and POST /explain: one admission ---------------------------------
    async def predict(self, scope, receive, send) -> None:
        start, status = time.perf_counter(), 500
        try:
            status = await self._respond(scope, receive, send, self._predicted)
        finally:
            self.metrics.observe_request(status, time.perf_counter() - start)

    async def explain(self, scope, receive, send) -> None:
        """One image's heat map over it (JSON with a PNG data URL), admitted like ``/predict``;
        501 where the served model has no feature maps to read."""
        if self.heatmaps.explainer is None:
            return await _send(send, 501, dumps({"detail": self.heatmaps.reason}))
        await self._respond(scope, receive, send, self._explained)

    async def _respond(self, scope, receive, send, work: Work) -> int:
        """Answer with ``work``'s body once admitted (``admit``), or with the ``Reject``;
        returns the status sent."""
        try:
            body = await self.admit(scope, receive, work)
        except Reject as err:
            await _send(send, err.status, dumps({"detail": err.detail}), err.headers)
            return err.status
        await _send(send, 200, body)
        return 200

    async def admit(self, scope, receive, work: Work) -> Any:
        """The admission of every POST endpoint (``/predict``, ``/explain``, the Open
        Inference Protocol's ``infer``): Content-Length (413) from the headers, the body
        within ``serve.body_timeout_s`` (408), then a queue slot (503 with Retry-After while
        ``serve.max_queue`` requests are in flight, or draining) and ``work(Content-Type,
        body, deadline)`` within ``serve.timeout`` of admission (504)."""
        config = self.config
        content_type, declared = b"", b""
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value
            elif name == b"content-length":
                declared = value
        if declared.isdigit() and int(declared) > config.max_body_bytes:
            raise too_large(int(declared), config.max_body_bytes)
        raw = await self._read_body(receive)
        content = content_type.decode("latin-1")
        return await self.admitted(lambda deadline: work(content, raw, deadline))

    async def admitted(self, work: Callable[[float], Awaitable[Any]]) -> Any:
        """A received request's queue slot (503 with Retry-After while ``serve.max_queue``
        requests are in flight, or draining), then ``work(deadline)`` within ``serve.timeout``
        (504): ``admit``'s second half, and the gRPC port's (``grpc_oip.py``) whole."""
        config = self.config
        # A queue slot only now: a slow or stalled upload holds none.
        if self.draining or self.in_flight >= config.max_queue:
            reason = (
                "draining: the server is shutting down"
                if self.draining
                else f"queue full ({config.max_queue} requests in flight); retry later"
            )
            raise Reject(503, reason, {"retry-after": str(config.retry_after_s)})
        self.in_flight += 1
        self.metrics.queue_depth(+1)
        try:  # serve.timeout runs from here: header checks, decoding and the model
            return await work(time.monotonic() + config.timeout)
        except (TimeoutError, Expired):  # asyncio's timeouts raise TimeoutError (Python 3.11)
            raise Reject(
                504,
                f"not answered within serve.timeout={config.timeout} s of admission "
                "(decoding included; the server is overloaded or the request too large)",
            ) from None
        finally:
            self.in_flight -= 1
            self.metrics.queue_depth(-1)

    async def _predicted(self, content_type: str, raw: bytes, deadline: float) -> bytes:
        """An admitted ``/predict`` body (any upload form, ``uploads.py``) -> the JSON answer,
        from the batcher, before ``deadline`` (``time.monotonic()``); ``TimeoutError`` or
        ``Expired`` after it."""
        config = self.config
        encoded, top_k = uploaded(content_type, raw, config.max_images_per_request, config.top_k)
        images = await self.decode(encoded, deadline)
        predictions, batch_images = self.predictions(
            await self.batcher.predict(images, top_k, deadline)
        )
        return (
            b'{"predictions":'
            + dumps(predictions)
            + b',"model":'
            + self.model_json
            + b',"batch_images":'
            + str(batch_images).encode()
            + b"}"
        )

    def predictions(self, answer: tuple) -> tuple[list[dict], int]:
        """The batcher's answer -> (one ``/predict`` prediction per image, images in the
        largest model call that served them)."""
        probs, indices, verdicts, sets, batch_images = answer
        classes = self.classes
        predictions = [
            {"labels": [classes[i] for i in idx], "probs": p} for p, idx in zip(probs, indices)
        ]
        for prediction, verdict in zip(predictions, verdicts or ()):  # the rejection rule's
            prediction["unknown"], prediction["score"] = verdict
        for prediction, members in zip(predictions, sets or ()):  # the conformal rule's
            prediction["set"] = [classes[i] for i in members]
        return predictions, batch_images

    async def _explained(self, content_type: str, raw: bytes, deadline: float) -> bytes:
        """An admitted ``/explain`` body (one image in any upload form, ``uploads.py``) -> the
        heat map's JSON, drawn in the explainer's own thread before ``deadline``. At the
        deadline a queued explanation is dropped unrun; a running one finishes (one image at
        the model's input size) while its request is answered 504."""
        encoded = uploaded(content_type, raw, 1, self.config.top_k)[0]
        image = (await self.decode(encoded, deadline))[0]  # (C, H, W) uint8
        loop = asyncio.get_running_loop()
        drawing = loop.run_in_executor(self.explainer, self.heatmaps.explain, image)
        return dumps(await asyncio.wait_for(drawing, max(0.0, deadline - time.monotonic())))

    async def decode(self, encoded: list[bytes], deadline: float) -> np.ndarray:
        """Encoded images -> uint8 (N, C, H, W) before ``deadline``: the pixel budget from the
        headers first (413), a small image decoded inline, bigger ones in a decode thread."""
        config = self.config
        pixels = request_pixels(encoded, config.max_pixels, config.max_request_pixels)
        if pixels <= INLINE_DECODE_PIXELS:
            return decode_all(encoded, self.spec)
        # A big decode must not stall the event loop (other requests, /health). At the
        # deadline the request is answered 504 and leaves its queue slot; the decode thread
        # stops before its next image (decode_all checks the deadline).
        loop = asyncio.get_running_loop()
        decoding = loop.run_in_executor(self.decoder, decode_all, encoded, self.spec, deadline)
        return await asyncio.wait_for(decoding, max(0.0, deadline - time.monotonic()))

    async def _read_body(self, receive) -> bytes:
        seconds = self.config.body_timeout_s
        try:
            async with asyncio.timeout(seconds):  # no extra task per request (wait_for's)
                return await self._read_chunks(receive)
        except TimeoutError:
            raise Reject(
                408,
                f"request body not received within serve.body_timeout_s={seconds} s",
                {"connection": "close"},
            ) from None

    async def _read_chunks(self, receive) -> bytes:
        chunks, size, limit = [], 0, self.config.max_body_bytes
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise Reject(400, "client disconnected before sending the whole body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise too_large(size, limit, at_least=True)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    # --- the other endpoints ------------------------------------------------------------
    async def page(self, request) -> Response:
        return HTMLResponse(PAGE_HTML)

    async def health(self, request) -> Response:
        if self.draining:
            return JSONResponse({"detail": "draining: the server is shutting down"}, 503)
        return PlainTextResponse("ok")

    async def describe(self, request) -> Response:
        return JSONResponse(self.info)

    async def prometheus(self, request) -> Response:
        return PlainTextResponse(self.metrics.render(), media_type="text/plain; version=0.0.4")

    def close(self) -> None:
        self.batcher.close()
        self.decoder.shutdown(wait=False, cancel_futures=True)
        self.explainer.shutdown(wait=False, cancel_futures=True)
