"""``RequestGate``: the ASGI middleware in front of ``POST /predict`` that keeps bad input and
overload away from the batch.

Why a middleware: LitServe's batched loop (``litserve/loops/simple_loops.py``,
``run_batched_loop``) runs ``decode_request`` for the whole batch inside one ``try``; one
undecodable image would fail every request batched with it. So every check and the decoding
itself happen here, per request, in the HTTP process, before anything is queued:

- queue depth: more than ``max_queue`` requests in flight -> 503 with ``Retry-After``, at once;
- ``Content-Type`` not ``image/*`` or ``application/json`` -> 415;
- body over ``max_body_bytes`` -> 413 (from ``Content-Length``, or counted while reading);
- bad JSON or base64, or bytes PIL cannot decode -> 400 naming the reason;
- well-formed JSON without an image, too many images, or a bad ``top_k`` -> 422.

Images of any size, mode (grayscale, RGBA, palette, CMYK) or channel count are converted as
``predict`` does (``lightning_cls.inference.images.decode_image``); what reaches the worker is
always a valid uint8 batch, sent on as JSON ``{"pixels": base64, "count": n, "top_k": k}``.
It is added through ``LitServer(middlewares=[(RequestGate, {...})])``, LitServe's documented
extension point.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from typing import Any

import numpy as np
from anyio import to_thread

from lightning_cls.inference.images import DECODE_ERRORS, decode_error_reason, decode_image
from lightning_cls.inference.spec import InputSpec
from lightning_cls.serve.metrics import ServeMetrics

# Bodies up to this size are decoded in the event loop (a 32x32 PNG takes ~50 us), larger ones
# in a worker thread so one big photo does not hold up other connections.
INLINE_DECODE_BYTES = 64_000


class Reject(Exception):
    """A request answered with ``status`` and ``detail`` before reaching the model."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None):
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers or {}


class RequestGate:
    def __init__(
        self,
        app,
        spec: InputSpec,
        metrics: ServeMetrics,
        api_path: str = "/predict",
        max_queue: int = 256,
        max_body_bytes: int = 10_000_000,
        max_images_per_request: int = 64,
        default_top_k: int = 5,
        retry_after_s: int = 1,
    ):
        self.app, self.spec, self.metrics, self.api_path = app, spec, metrics, api_path
        self.max_queue, self.max_body_bytes = max_queue, max_body_bytes
        self.max_images, self.default_top_k = max_images_per_request, default_top_k
        self.retry_after_s = retry_after_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"] == "/health" and self.metrics.draining.value:
            return await _respond(send, 503, "draining: the server is shutting down")
        if scope["path"] != self.api_path or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        if not self.metrics.try_admit(self.max_queue):
            self.metrics.observe_request(503, time.perf_counter() - start)
            return await _respond(
                send,
                503,
                f"queue full ({self.max_queue} requests in flight); retry later",
                {"retry-after": str(self.retry_after_s)},
            )
        status = {"code": 500}

        async def send_recording(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            try:
                body = await self._forward_body(scope, receive)
            except Reject as err:
                status["code"] = err.status
                return await _respond(send, err.status, err.detail, err.headers)
            await self.app(_json_scope(scope, len(body)), _replay(body, receive), send_recording)
        finally:
            self.metrics.release()
            self.metrics.observe_request(status["code"], time.perf_counter() - start)

    async def _forward_body(self, scope, receive) -> bytes:
        """Check and decode the request; return the body the LitAPI receives."""
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if not (content_type.startswith("image/") or content_type == "application/json"):
            raise Reject(
                415,
                f"unsupported Content-Type '{content_type or '(none)'}'; send raw "
                'image bytes as image/* or JSON {"image": base64} / '
                '{"images": [base64, ...]} as application/json',
            )
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            raise Reject(413, self._too_large(int(declared)))
        raw = await self._read_body(receive)
        if content_type.startswith("image/"):
            encoded, top_k = [raw], self.default_top_k
        else:
            encoded, top_k = self._parse_json(raw)
        if sum(map(len, encoded)) <= INLINE_DECODE_BYTES:
            pixels = self._decode_all(encoded)  # small: a thread hop would cost more than this
        else:
            pixels = await to_thread.run_sync(self._decode_all, encoded)
        payload = {
            "pixels": base64.b64encode(pixels.tobytes()).decode("ascii"),
            "count": len(encoded),
            "top_k": top_k,
        }
        return json.dumps(payload).encode()

    async def _read_body(self, receive) -> bytes:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise Reject(400, "client disconnected before sending the whole body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise Reject(413, self._too_large(size, at_least=True))
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _too_large(self, size: int, at_least: bool = False) -> str:
        return (
            f"request body of {'at least ' if at_least else ''}{size} bytes exceeds "
            f"max_body_bytes={self.max_body_bytes}; send a smaller image "
            "(the server resizes to the model's input anyway) or raise serve.max_body_bytes"
        )

    def _parse_json(self, raw: bytes) -> tuple[list[bytes], int]:
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise Reject(400, f"body is not valid JSON ({err})") from err
        if not isinstance(body, dict) or ("image" in body) == ("images" in body):
            raise Reject(
                422,
                'JSON body must be an object with exactly one of "image" '
                '(base64 string) or "images" (list of base64 strings)',
            )
        items = [body["image"]] if "image" in body else body["images"]
        if not isinstance(items, list) or not 1 <= len(items) <= self.max_images:
            raise Reject(422, f'"images" must be a list of 1 to {self.max_images} base64 strings')
        top_k = body.get("top_k", self.default_top_k)
        if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
            raise Reject(422, f'"top_k" must be an integer >= 1, got {top_k!r}')
        encoded = []
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise Reject(422, f"image {i} is a {type(item).__name__}, not a base64 string")
            try:
                encoded.append(base64.b64decode(item, validate=True))
            except (binascii.Error, ValueError) as err:
                raise Reject(400, f"image {i} is not valid base64 ({err})") from err
        return encoded, top_k

    def _decode_all(self, encoded: list[bytes]) -> np.ndarray:
        """Raw encoded images -> uint8 (N, C, H, W); 400 naming the first undecodable one."""
        spec, arrays = self.spec, []
        for i, data in enumerate(encoded):
            try:
                arrays.append(
                    decode_image(data, spec.image_size, spec.num_channels, spec.resize_size)
                )
            except DECODE_ERRORS as err:
                which = f"image {i}" if len(encoded) > 1 else "image"
                raise Reject(400, f"{which}: {decode_error_reason(err)}") from err
        return np.ascontiguousarray(np.stack(arrays))


def _json_scope(scope: dict[str, Any], length: int) -> dict[str, Any]:
    headers = [
        (k, v) for k, v in scope["headers"] if k.lower() not in (b"content-type", b"content-length")
    ]
    headers += [(b"content-type", b"application/json"), (b"content-length", str(length).encode())]
    return {**scope, "headers": headers}


def _replay(body: bytes, receive_more):
    """A ``receive`` that gives ``body`` once, then waits on the client's (a disconnect)."""
    sent = False

    async def receive():
        nonlocal sent
        if sent:
            return await receive_more()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def _respond(send, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    raw_headers += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})
