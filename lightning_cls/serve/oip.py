"""The Open Inference Protocol v2 (KServe v2 / Triton HTTP/REST) beside the server's own API.

``OpenInference`` answers every path under ``/v2`` of a ``ServeApp``:

- ``GET /v2/health/live``, ``GET /v2/health/ready`` (503 while draining), ``GET /v2`` (server
  metadata), ``GET /v2/models/{name}`` (inputs, outputs, class labels in ``parameters``) and
  ``GET /v2/models/{name}/ready``; ``/versions/{version}`` may follow the name.
- ``POST /v2/models/{name}/infer`` with exactly one input:
  ``input`` FP32 ``[-1, C, H, W]``, the model's normalized input, answered with ``logits`` and
  ``probabilities`` FP32 ``[N, K]`` (the artifact's TTA and temperature applied, as
  ``Predictor.tta_logits`` and the task's probabilities in-process), computed in the model
  thread the batcher owns (one model call at a time; tensors are not batched across requests);
  or ``image`` BYTES ``[N]``, encoded images (base64 strings in JSON, raw bytes in the binary
  extension), answered by ``/predict``'s own path (pixel budget, off-loop decoding, dynamic
  batching) as ``label`` (the top label, "" where the task predicts none) and ``prediction``
  (each image's ``/predict`` JSON object) BYTES ``[N]``; ``parameters.top_k`` as ``/predict``'s.

Bodies are JSON, optionally followed by binary tensors (the binary tensor data extension: the
``Inference-Header-Content-Length`` header says where the JSON ends). Every infer goes through
the app's one admission (``ServeApp._admit``: body size and deadline, queue slot/503,
``serve.timeout``/504). Errors are ``{"error": "..."}``: 404 for an unknown model or path, 400
naming the bad field, the admission's own statuses otherwise.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import time

import numpy as np

from lightning_cls import __version__
from lightning_cls.serve.inputs import Reject

try:
    from orjson import dumps, loads
except ImportError:  # pragma: no cover - orjson is in the serve extra
    loads = json.loads

    def dumps(obj) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()


PREFIX = "/v2"
TENSOR, IMAGE = "input", "image"  # the two inputs a model takes
OUTPUTS = {TENSOR: ("logits", "probabilities"), IMAGE: ("label", "prediction")}
HEADER_LENGTH = b"inference-header-content-length"
JSON_ONLY = [(b"content-type", b"application/json")]


class OpenInference:
    """The ``/v2`` routes of one ``ServeApp`` (ASGI: ``await oip(scope, receive, send)``)."""

    def __init__(self, app):
        self.app, spec = app, app.spec
        model = app.info["model"]
        self.name = model.get("name") or spec.model_name or "model"
        self.version = str(model.get("version") or "1")
        self.shape = list(spec.input_shape)  # (C, H, W)
        self.predictor = app.batcher.predictor
        k = spec.num_classes
        self.metadata = dumps(
            {
                "name": self.name,
                "versions": [self.version],
                "platform": f"lightning_cls_{model.get('runtime', self.predictor.kind)}",
                "inputs": [
                    {"name": TENSOR, "datatype": "FP32", "shape": [-1, *self.shape]},
                    {"name": IMAGE, "datatype": "BYTES", "shape": [-1]},
                ],
                "outputs": [
                    {"name": "logits", "datatype": "FP32", "shape": [-1, k]},
                    {"name": "probabilities", "datatype": "FP32", "shape": [-1, k]},
                    {"name": "label", "datatype": "BYTES", "shape": [-1]},
                    {"name": "prediction", "datatype": "BYTES", "shape": [-1]},
                ],
                "parameters": {
                    "classes": list(spec.classes),
                    "task": spec.decision.name,
                    "mean": list(spec.mean),
                    "std": list(spec.std),
                    "layout": spec.layout,
                    "top_k": app.config.top_k,
                },
            }
        )
        self.server = dumps(
            {"name": "lightning_cls", "version": __version__, "extensions": ["binary_tensor_data"]}
        )

    async def __call__(self, scope, receive, send) -> None:
        method, parts = scope["method"], scope["path"][len(PREFIX) :].strip("/").split("/")
        try:
            if parts[0] == "models" and len(parts) > 1:
                return await self._model(scope, receive, send, method, parts[1:])
            static = {"": self.server, "health/live": b'{"live":true}'}
            if "/".join(parts) == "health/ready":
                static["health/ready"] = self._ready()
            body = static.get("/".join(parts))
            if body is None:
                raise Reject(404, f"no such endpoint: {scope['path']}")
            _allow(method, "GET")
            await _send(send, 200, body)
        except Reject as err:
            await _send(send, err.status, dumps({"error": err.detail}), err.headers)

    async def _model(self, scope, receive, send, method: str, parts: list[str]) -> None:
        name, rest = parts[0], parts[1:]
        if name != self.name:
            raise Reject(404, f"unknown model '{name}'; this server serves '{self.name}'")
        if rest[:1] == ["versions"] and len(rest) > 1:
            if rest[1] != self.version:
                raise Reject(
                    404, f"unknown version '{rest[1]}' of model '{name}'; it has '{self.version}'"
                )
            rest = rest[2:]
        if not rest:
            _allow(method, "GET")
            return await _send(send, 200, self.metadata)
        if rest == ["ready"]:
            _allow(method, "GET")
            return await _send(send, 200, self._ready())
        if rest == ["infer"]:
            _allow(method, "POST")
            return await self._infer(scope, receive, send)
        raise Reject(404, f"no such endpoint: {scope['path']}")

    def _ready(self) -> bytes:
        if self.app.draining:
            raise Reject(503, "draining: the server is shutting down")
        return b'{"ready":true}'

    async def _infer(self, scope, receive, send) -> None:
        split = None
        for key, value in scope["headers"]:
            if key == HEADER_LENGTH:
                if not value.isdigit():
                    raise Reject(
                        400,
                        "Inference-Header-Content-Length must be an integer, got "
                        f"{value.decode('latin-1')!r}",
                    )
                split = int(value)
            elif key == b"content-encoding":
                raise Reject(
                    400, "compressed request bodies are not supported; send it uncompressed"
                )
        # The body is JSON (then binary tensors): the admission sees it as such, whatever the
        # client's Content-Type (tritonclient sends none).
        headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"] + JSON_ONLY
        admitted = {**scope, "headers": headers}
        extra: list[tuple[bytes, bytes]] = []

        async def work(kind: str, raw: bytes, deadline: float) -> bytes:
            body, binary = await self._answer(raw, split, deadline)
            if binary is not None:
                extra.append((HEADER_LENGTH, str(len(body)).encode()))
                body += binary
            return body

        body = await self.app._admit(admitted, receive, work)
        await _send(send, 200, body, extra)

    async def _answer(self, raw: bytes, split: int | None, deadline: float):
        """An admitted body -> (the answer's JSON, its binary tail or None)."""
        request, tail = _parse(raw, split)
        inputs = request.get("inputs")
        if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], dict):
            raise Reject(400, f'"inputs" must list exactly one input: {TENSOR!r} or {IMAGE!r}')
        given = inputs[0]
        name = given.get("name")
        if name not in OUTPUTS:
            raise Reject(
                400,
                f"unknown input {name!r}; this model takes {TENSOR!r} (FP32 "
                f"{[-1, *self.shape]}) or {IMAGE!r} (BYTES [-1])",
            )
        wanted = _requested(request, OUTPUTS[name])
        parameters = request.get("parameters") or {}
        if name == TENSOR:
            x = _tensor(given, tail, [-1, *self.shape])
            outputs = await self._tensor_outputs(x, deadline)
        else:
            encoded = _strings(given, tail)
            outputs = await self._image_outputs(encoded, parameters.get("top_k"), deadline)
        answer = {"model_name": self.name, "model_version": self.version, "outputs": []}
        if "id" in request:
            answer["id"] = request["id"]
        binary = []
        for out, as_binary in wanted:
            datatype, array = outputs[out]
            tensor = {"name": out, "datatype": datatype, "shape": list(array.shape)}
            if as_binary or (as_binary is None and parameters.get("binary_data_output")):
                data = _to_bytes(datatype, array)
                tensor["parameters"] = {"binary_data_size": len(data)}
                binary.append(data)
            else:
                tensor["data"] = array.reshape(-1).tolist()
            answer["outputs"].append(tensor)
        return dumps(answer), (b"".join(binary) if binary else None)

    async def _tensor_outputs(self, x: np.ndarray, deadline: float) -> dict:
        """Normalized FP32 (N, C, H, W) -> logits and probabilities, in the model thread."""
        predictor, size = self.predictor, self.app.config.max_batch_size

        def run():
            if time.monotonic() > deadline:  # answered 504 already: do not run it
                raise TimeoutError
            logits = np.concatenate(
                [predictor.tta_logits(x[i : i + size]) for i in range(0, len(x), size)]
            )
            return logits, predictor.task.probabilities(logits)

        loop = asyncio.get_running_loop()
        running = loop.run_in_executor(self.app.batcher.thread, run)
        logits, probs = await asyncio.wait_for(running, max(0.0, deadline - time.monotonic()))
        return {"logits": ("FP32", logits), "probabilities": ("FP32", probs)}

    async def _image_outputs(self, encoded: list[bytes], top_k, deadline: float) -> dict:
        """Encoded images -> ``/predict``'s answer for them, by ``/predict``'s own path."""
        limit = self.app.config.max_images_per_request
        if len(encoded) > limit:
            raise Reject(
                400,
                f"input 'image' holds {len(encoded)} images; serve.max_images_per_request={limit}",
            )
        request = {"images": [base64.b64encode(e).decode() for e in encoded]}
        if top_k is not None:
            request["top_k"] = top_k
        try:
            answer = loads(await self.app._predicted("json", dumps(request), deadline))
        except Reject as err:  # /predict's 422 (a bad top_k) is the protocol's 400
            raise Reject(400 if err.status == 422 else err.status, err.detail, err.headers) from err
        predictions = answer["predictions"]
        labels = [(p["labels"] or [""])[0] for p in predictions]
        return {
            "label": ("BYTES", np.array(labels, dtype=object)),
            "prediction": (
                "BYTES",
                np.array([dumps(p).decode() for p in predictions], dtype=object),
            ),
        }


def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise Reject(405, f"{method} is not allowed here; use {allowed}", {"allow": allowed})


def _parse(raw: bytes, split: int | None) -> tuple[dict, bytes]:
    """A body -> (its JSON object, the binary tensors after it)."""
    if split is not None and split > len(raw):
        raise Reject(
            400,
            f"Inference-Header-Content-Length={split} is longer than the body ({len(raw)} bytes)",
        )
    head, tail = (raw, b"") if split is None else (raw[:split], raw[split:])
    try:
        request = loads(head)
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise Reject(400, f"body is not valid JSON ({err})") from err
    if not isinstance(request, dict):
        raise Reject(400, 'the body must be a JSON object with "inputs"')
    return request, tail


def _requested(request: dict, names: tuple[str, ...]) -> list[tuple[str, bool | None]]:
    """(output name, binary or None for the request's default) for each output to answer."""
    asked = request.get("outputs")
    if asked is None:
        return [(name, None) for name in names]
    if not isinstance(asked, list) or not all(isinstance(o, dict) for o in asked):
        raise Reject(400, '"outputs" must be a list of {"name": ...} objects')
    wanted = []
    for out in asked:
        if out.get("name") not in names:
            raise Reject(
                400,
                f"unknown output {out.get('name')!r} for this input; it answers {', '.join(names)}",
            )
        wanted.append((out["name"], bool((out.get("parameters") or {}).get("binary_data"))))
    return wanted


def _tensor(given: dict, tail: bytes, expected: list[int]) -> np.ndarray:
    """The FP32 input, checked against the model's shape ([-1, C, H, W])."""
    if given.get("datatype") != "FP32":
        raise Reject(
            400, f"input 'input' has datatype {given.get('datatype')!r}; this model takes FP32"
        )
    shape = given.get("shape")
    if (
        not isinstance(shape, list)
        or len(shape) != len(expected)
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in shape)
        or shape[0] < 1
        or shape[1:] != expected[1:]
    ):
        raise Reject(
            400,
            f"input 'input' has shape {shape}; this model takes {expected} "
            "(batch first, at least 1)",
        )
    data = _data(given, tail, "<f4")
    try:
        x = np.asarray(data, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError) as err:
        raise Reject(400, f"input 'input': data are not numbers ({err})") from err
    if x.size != int(np.prod(shape)):
        raise Reject(
            400, f"input 'input' has {x.size} values; its shape {shape} needs {int(np.prod(shape))}"
        )
    return x.reshape(shape)


def _strings(given: dict, tail: bytes) -> list[bytes]:
    """The BYTES input's elements: base64 strings in JSON, raw bytes in binary."""
    if given.get("datatype") != "BYTES":
        raise Reject(
            400,
            f"input 'image' has datatype {given.get('datatype')!r}; send encoded images as BYTES",
        )
    shape = given.get("shape")
    if (
        not isinstance(shape, list)
        or len(shape) != 1
        or not isinstance(shape[0], int)
        or shape[0] < 1
    ):
        raise Reject(400, f"input 'image' has shape {shape}; send [N] encoded images, N >= 1")
    data = _data(given, tail, None)
    if isinstance(data, bytes):
        items = _unpack_bytes(data)
    else:
        items = []
        for i, item in enumerate(data if isinstance(data, list) else [data]):
            if not isinstance(item, str):
                raise Reject(
                    400,
                    f"input 'image' element {i} is a {type(item).__name__}, not a base64 string",
                )
            try:
                items.append(base64.b64decode(item, validate=True))
            except ValueError as err:
                raise Reject(400, f"input 'image' element {i} is not valid base64 ({err})") from err
    if len(items) != shape[0]:
        raise Reject(
            400, f"input 'image' has {len(items)} elements; its shape {shape} needs {shape[0]}"
        )
    return items


def _data(given: dict, tail: bytes, dtype: str | None):
    """A tensor's ``data`` (JSON) or its bytes from the binary tail."""
    size = (given.get("parameters") or {}).get("binary_data_size")
    if size is None:
        if "data" not in given:
            raise Reject(400, f'input {given["name"]!r} has no "data" (nor binary_data_size)')
        return given["data"]
    if not isinstance(size, int) or not 0 <= size <= len(tail):
        raise Reject(
            400,
            f"input {given['name']!r}: binary_data_size={size!r} but {len(tail)} binary "
            "bytes follow the JSON",
        )
    data = tail[:size]
    if dtype is None:
        return data
    if size % 4:
        raise Reject(
            400, f"input {given['name']!r}: {size} bytes is not a whole number of FP32 values"
        )
    return np.frombuffer(data, dtype)


def _unpack_bytes(data: bytes) -> list[bytes]:
    """The binary BYTES layout: each element a little-endian uint32 length, then its bytes."""
    items, at = [], 0
    while at < len(data):
        if at + 4 > len(data):
            raise Reject(400, "input 'image': binary BYTES data end inside an element's length")
        (n,) = struct.unpack_from("<I", data, at)
        if at + 4 + n > len(data):
            raise Reject(400, "input 'image': binary BYTES data end inside an element")
        items.append(data[at + 4 : at + 4 + n])
        at += 4 + n
    return items


def _to_bytes(datatype: str, array: np.ndarray) -> bytes:
    if datatype == "FP32":
        return np.ascontiguousarray(array, "<f4").tobytes()
    parts = []
    for item in array.reshape(-1):
        raw = item if isinstance(item, bytes) else str(item).encode()
        parts += [struct.pack("<I", len(raw)), raw]
    return b"".join(parts)


async def _send(send, status: int, body: bytes, headers=()) -> None:
    """``ServeApp``'s sender, with headers given as pairs or a dict."""
    from lightning_cls.serve.app import _send as send_json

    if not isinstance(headers, dict):
        headers = {k.decode(): v.decode() for k, v in headers}
    await send_json(send, status, body, headers)
