"""``ServeApp``: the ASGI application of one server process.

``POST /predict`` is answered by a plain ASGI function (no framework routing, no per-request
validation models): read the body under a deadline, admit it to the queue, check and decode
the images, await the ``Batcher``, send pre-serialised JSON. Everything else (``GET /``,
``/health``, ``/info``, ``/metrics``, ``POST /explain``: the heat map of one image, where the
served model supports it, ``serve/heatmaps.py``) goes to a small Starlette app.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

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
    content_kind,
    decode_all,
    parse_json,
    request_pixels,
    too_large,
)
from lightning_cls.serve.metrics import ServeMetrics
from lightning_cls.serve.page import PAGE_HTML

try:
    from orjson import dumps
except ImportError:  # pragma: no cover - orjson is in the serve extra

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()


log = logging.getLogger(__name__)
JSON_HEADERS = [(b"content-type", b"application/json")]


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
        self.in_flight = 0  # admitted /predict requests not yet answered, this process
        self.draining = False  # set on SIGTERM: /health and new /predict get 503
        self.model_json = dumps(info)  # the same for every answer: serialised once
        self.heatmaps = HeatMaps(predictor)
        self.info = {"model": {**info, "spec": self.spec.to_dict(), "config": config.public()}}
        self.info["model"]["explain"] = self.heatmaps.describe()
        self.routes = Starlette(
            routes=[
                Route("/", self.page),
                Route("/health", self.health),
                Route("/info", self.describe),
                Route("/metrics", self.prometheus),
                Route("/explain", self.explain, methods=["POST"]),
            ]
        )

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] == self.config.api_path:
            if scope["method"] == "POST":
                return await self.predict(scope, receive, send)
        return await self.routes(scope, receive, send)

    # --- POST /predict -------------------------------------------------------------------
    async def predict(self, scope, receive, send) -> None:
        start = time.perf_counter()
        status = 500
        try:
            try:
                body = await self._answer(scope, receive)
                status = 200
                await _send(send, 200, body)
            except Reject as err:
                status = err.status
                await _send(send, status, dumps({"detail": err.detail}), err.headers)
        finally:
            self.metrics.observe_request(status, time.perf_counter() - start)

    async def _answer(self, scope, receive) -> bytes:
        config = self.config
        content_type, declared = b"", b""
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value
            elif name == b"content-length":
                declared = value
        kind = content_kind(content_type.decode("latin-1"))
        if declared.isdigit() and int(declared) > config.max_body_bytes:
            raise too_large(int(declared), config.max_body_bytes)
        raw = await self._read_body(receive)
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
            answer = await self._admitted(kind, raw, time.monotonic() + config.timeout)
        except (TimeoutError, asyncio.TimeoutError, Expired):  # one class from Python 3.11
            raise Reject(
                504,
                f"not answered within serve.timeout={config.timeout} s of admission "
                "(decoding included; the server is overloaded or the request too large)",
            ) from None
        finally:
            self.in_flight -= 1
            self.metrics.queue_depth(-1)
        probs, indices, verdicts, batch_images = answer
        classes = self.classes
        predictions = [
            {"labels": [classes[i] for i in idx], "probs": p} for p, idx in zip(probs, indices)
        ]
        for prediction, verdict in zip(predictions, verdicts or ()):  # the rejection rule's
            prediction["unknown"], prediction["score"] = verdict
        return (
            b'{"predictions":'
            + dumps(predictions)
            + b',"model":'
            + self.model_json
            + b',"batch_images":'
            + str(batch_images).encode()
            + b"}"
        )

    async def _admitted(self, kind: str, raw: bytes, deadline: float) -> tuple:
        """An admitted body -> the batcher's answer, all before ``deadline``
        (``time.monotonic()``); ``TimeoutError`` or ``Expired`` after it."""
        config = self.config
        if kind == "image":
            encoded, top_k = [raw], config.top_k
        else:
            encoded, top_k = parse_json(raw, config.max_images_per_request, config.top_k)
        pixels = request_pixels(encoded, config.max_pixels, config.max_request_pixels)
        if pixels <= INLINE_DECODE_PIXELS:
            images = decode_all(encoded, self.spec)
        else:  # a big decode must not stall the event loop (other requests, /health)
            loop = asyncio.get_running_loop()
            # At the deadline the request is answered 504 and leaves its queue slot; the
            # decode thread stops before its next image (decode_all checks the deadline).
            decoding = loop.run_in_executor(self.decoder, decode_all, encoded, self.spec, deadline)
            images = await asyncio.wait_for(decoding, max(0.0, deadline - time.monotonic()))
        return await self.batcher.predict(images, top_k, deadline)

    async def _read_body(self, receive) -> bytes:
        seconds = self.config.body_timeout_s
        try:
            if hasattr(asyncio, "timeout"):  # Python >= 3.11: no extra task per request
                async with asyncio.timeout(seconds):
                    return await self._read_chunks(receive)
            return await asyncio.wait_for(self._read_chunks(receive), seconds)
        except (TimeoutError, asyncio.TimeoutError):  # the same class from Python 3.11
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

    async def explain(self, request) -> Response:
        """One image's heat map over it (JSON with a PNG data URL); 501 where the served
        model has no feature maps to read."""
        if self.heatmaps.explainer is None:
            return JSONResponse({"detail": self.heatmaps.reason}, 501)
        config = self.config
        try:
            content_kind(request.headers.get("content-type", ""))
            raw = await self._read_body(request.receive)
            request_pixels([raw], config.max_pixels, config.max_request_pixels)
            image = decode_all([raw], self.spec)[0]  # (C, H, W) uint8
        except Reject as err:
            return JSONResponse({"detail": err.detail}, err.status, err.headers)
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(self.decoder, self.heatmaps.explain, image)
        return JSONResponse(answer)

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


async def _send(send, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
    raw = [*JSON_HEADERS, (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
