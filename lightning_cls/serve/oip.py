"""The Open Inference Protocol v2 (KServe v2, Triton's HTTP/REST API) beside ``/predict``.

``OpenInference`` answers every ``/v2`` path of one ``ServeApp``, whatever runtime it serves:

- ``GET /v2/health/live``, ``/v2/health/ready`` (503 while draining), ``GET /v2`` (server
  metadata: name, version, extensions);
- ``GET /v2/models/{name}[/versions/{version}]``: the inputs, outputs and, in
  ``parameters``, the class labels and the input description (mean, std, size, task);
  ``.../ready``; ``.../config`` (Triton's model-configuration extension: the model config as
  JSON, ``TYPE_FP32`` / ``TYPE_STRING`` and dims without the batch dimension) and
  ``.../stats`` or ``GET /v2/models/stats`` (Triton's statistics extension: ``ServeMetrics``'
  counters, summed over worker processes; ``tritonclient``'s ``get_model_config`` and
  ``get_inference_statistics`` read them);
- ``POST /v2/models/{name}[/versions/{version}]/infer``, admitted like ``/predict``
  (``ServeApp.admit``: queue slot 503, ``serve.timeout`` 504, body limits), with one input:
  ``input``, FP32 (-1, C, H, W), the model's own normalized input -> ``logits`` and
  ``probabilities`` (the artifact's TTA and temperature applied, as ``Predictor.tta_logits``
  and the task give them), batched with other such requests; or ``image``, BYTES (-1,),
  encoded images -> ``label`` (each image's top label, "" where the task predicts none) and
  ``prediction`` (the JSON object ``/predict`` answers for that image: labels, probabilities,
  and the model's rejection verdict and prediction set where it has them), through the pixel
  budget, the off-loop decode and the batcher as ``/predict``.

JSON and Triton's binary-data extension both ways (``oip_tensors.py``), and Triton's
classification extension (an output's ``parameters.classification: k`` -> the top-k
``"value:index:label"`` strings). Errors are ``{"error": "..."}``: 404 for an unknown model or
version, 405 with ``Allow`` for a wrong method, 400 naming the input, shape, datatype,
output or ``parameters`` at fault (and for a compressed body, and FP32 values that are not
finite), 422 when finite values give logits that are not (JSON would carry them as
``null``), and admission's own statuses.
"""

from __future__ import annotations

import re
import time

import numpy as np

from lightning_cls import __version__
from lightning_cls.serve.inputs import Reject, checked_top_k, too_large
from lightning_cls.serve.oip_tensors import (
    Request,
    TensorSpec,
    classification,
    encode_response,
    header_length,
    parse_request,
)
from lightning_cls.serve.responses import dumps, send

V2_PREFIX = "/v2"
EXTENSIONS = ["binary_tensor_data", "classification", "model_configuration", "statistics"]
MODEL_PATH = re.compile(r"/v2/models/([^/]+)(?:/versions/([^/]+))?(/ready|/infer|/config|/stats)?")
ALL_STATS = "/v2/models/stats"  # every model's statistics (this server's one)
TRITON_TYPES = {"FP32": "TYPE_FP32", "BYTES": "TYPE_STRING"}
TENSOR_INPUT, IMAGE_INPUT = "input", "image"
BINARY = "application/octet-stream"


class OpenInference:
    def __init__(self, app, kind: str, info: dict):
        self.app, self.spec = app, app.spec
        self.name = info.get("name") or self.spec.model_name or "model"
        self.version = str(info.get("version") or "1")
        self.kind = kind
        spec, k = self.spec, self.spec.num_classes
        self.inputs = {
            TENSOR_INPUT: TensorSpec(TENSOR_INPUT, "FP32", (-1, *spec.input_shape)),
            IMAGE_INPUT: TensorSpec(IMAGE_INPUT, "BYTES", (-1,)),
        }
        self.outputs = {  # what each input answers
            TENSOR_INPUT: [
                TensorSpec("logits", "FP32", (-1, k)),
                TensorSpec("probabilities", "FP32", (-1, k)),
            ],
            IMAGE_INPUT: [
                TensorSpec("label", "BYTES", (-1,)),  # the top label ("" where none)
                TensorSpec("prediction", "BYTES", (-1,)),  # /predict's JSON object
            ],
        }
        self.metadata_dict = {  # ModelMetadata over gRPC (grpc_oip.py): the same, less parameters
            "name": self.name,
            "versions": [self.version],
            "platform": f"lightning_cls_{kind}",
            "inputs": [s.metadata() for s in self.inputs.values()],
            "outputs": [s.metadata() for o in self.outputs.values() for s in o],
            "parameters": {
                "classes": list(spec.classes),
                "task": spec.task["name"],
                "image_size": spec.image_size,
                "num_channels": spec.num_channels,
                "mean": list(spec.mean),
                "std": list(spec.std),
            },
        }
        self.metadata = dumps(self.metadata_dict)
        self.config = dumps(self.model_config(kind))
        self.server_metadata = {
            "name": "lightning_cls",
            "version": __version__,
            "extensions": EXTENSIONS,
        }

    async def __call__(self, scope, receive, send_message) -> None:
        path, method = scope["path"].rstrip("/"), scope["method"]
        if (
            path in (V2_PREFIX, "/v2/health/live", "/v2/health/ready", ALL_STATS)
            and method != "GET"
        ):
            return await _error(
                send_message, 405, f"{path} takes GET, not {method}", {"allow": "GET"}
            )
        if method == "GET" and (refused := self._body_refused(scope)) is not None:
            return await _error(send_message, refused.status, refused.detail, refused.headers)
        if path == V2_PREFIX:
            return await send(send_message, 200, dumps(self.server_metadata))
        if path == "/v2/health/live":
            return await send(send_message, 200, b'{"live":true}')
        if path == "/v2/health/ready":
            return await self._ready(send_message, b'{"ready":true}')
        if path == ALL_STATS:
            return await send(send_message, 200, self.statistics())
        match = MODEL_PATH.fullmatch(path)
        if match is None:
            return await _error(send_message, 404, f"no Open Inference Protocol endpoint {path}")
        name, version, action = match.groups()
        try:
            self.check_model(name, version)
        except Reject as err:
            return await _error(send_message, err.status, err.detail)
        want = "POST" if action == "/infer" else "GET"
        if method != want:
            return await _error(
                send_message, 405, f"{path} takes {want}, not {method}", {"allow": want}
            )
        if action == "/infer":
            return await self.infer(scope, receive, send_message)
        if action == "/ready":
            ready = dumps({"name": self.name, "ready": True})
            return await self._ready(send_message, ready)
        if action == "/config":
            return await send(send_message, 200, self.config)
        if action == "/stats":
            return await send(send_message, 200, self.statistics())
        return await send(send_message, 200, self.metadata)

    def check_model(self, name: str, version: str | None) -> None:
        """A 404 naming the model served unless ``name`` (and ``version``, if given) is it."""
        if name != self.name or version not in (None, self.version):
            which = f"'{name}'" + (f" version '{version}'" if version else "")
            served = f"'{self.name}' (version '{self.version}')"
            raise Reject(404, f"unknown model {which}; this server serves {served}")

    def _body_refused(self, scope) -> Reject | None:
        """A GET (health, metadata, config, stats) takes no body: one declared over
        ``serve.max_body_bytes`` is a 413 as ``/predict``'s, any other a 400; never read."""
        declared, chunked = b"", False
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = value
            elif name == b"transfer-encoding":
                chunked = True
        limit = self.app.config.max_body_bytes
        if declared.isdigit() and int(declared) > limit:
            refused = too_large(int(declared), limit)
            return Reject(413, refused.detail, {"connection": "close"})
        if chunked or (declared and declared != b"0"):
            detail = f"GET {scope['path']} takes no body; send the request without one"
            return Reject(400, detail, {"connection": "close"})
        return None

    def model_stats(self) -> dict:
        """Triton's ``$model_stat`` for the served model (``ServeMetrics``' counters)."""
        return {"name": self.name, "version": self.version, **self.app.metrics.model_stats()}

    def statistics(self) -> bytes:
        """Triton's ``$stats_model_response`` for the served model."""
        return dumps({"model_stats": [self.model_stats()]})

    def model_config(self, kind: str) -> dict:
        """Triton's model configuration (``model_config.proto`` as JSON): dims without the
        batch dimension, the image input one string per image (``reshape`` to a scalar)."""

        def tensor(spec: TensorSpec) -> dict:
            entry = {"name": spec.name, "data_type": TRITON_TYPES[spec.datatype]}
            dims = list(spec.shape[1:])
            entry["dims"] = dims or [1]
            if not dims:
                entry["reshape"] = {"shape": []}
            return entry

        config = self.app.config
        return {
            "name": self.name,
            "platform": f"lightning_cls_{kind}",
            "backend": kind,
            "version_policy": {"latest": {"num_versions": 1}},
            "max_batch_size": config.max_batch_size,
            "input": [tensor(s) for s in self.inputs.values()],
            "output": [tensor(s) for o in self.outputs.values() for s in o],
            "dynamic_batching": {
                "max_queue_delay_microseconds": int(config.batch_timeout * 1_000_000)
            },
            "parameters": {"classes": {"string_value": ",".join(self.spec.classes)}},
        }

    async def _ready(self, send_message, body: bytes) -> None:
        if self.app.draining:
            return await _error(send_message, 503, "draining: the server is shutting down")
        await send(send_message, 200, body)

    async def infer(self, scope, receive, send_message) -> None:
        """One ``infer`` request, admitted like ``/predict`` and counted in its metrics."""
        start, status = time.perf_counter(), 500
        try:
            headers = dict(scope["headers"])
            if b"content-encoding" in headers:
                raise Reject(400, "compressed request bodies are not supported; send it plain")
            length = header_length(headers.get(b"inference-header-content-length"))

            async def work(content_type, raw, deadline):
                # Any Content-Type: the body is the protocol's JSON, or JSON and binary
                # tensors (Inference-Header-Content-Length says which).
                return await self._answer(raw, length, deadline)

            body, json_length = await self.app.admit(scope, receive, work)
        except Reject as err:
            status = err.status
            await _error(send_message, err.status, err.detail, err.headers)
        else:
            if json_length is None:
                await send(send_message, 200, body)
            else:
                extra = {"inference-header-content-length": str(json_length)}
                await send(send_message, 200, body, extra, BINARY)
            status = 200
        finally:
            self.app.metrics.observe_request(status, time.perf_counter() - start)

    async def _answer(self, raw: bytes, json_length: int | None, deadline: float):
        config = self.app.config
        request = parse_request(raw, json_length, self.inputs, config.max_images_per_request)
        return encode_response(*await self.run(request, deadline))

    async def run(self, request: Request, deadline: float) -> tuple[dict, list[tuple]]:
        """A checked request (over HTTP, or gRPC: ``grpc_oip.py``) -> the answer's head
        (model name and version, id) and its outputs as (name, datatype, shape, data,
        binary), from the batcher before ``deadline``."""
        config = self.app.config
        offered = {s.name: s for s in self.outputs[request.input]}
        for name in request.outputs:
            if name not in offered:
                raise Reject(
                    400,
                    f"unknown output {name!r} for input '{request.input}'; it "
                    f"answers {', '.join(offered)}",
                )
        if request.input == TENSOR_INPUT:
            logits, _ = await self.app.batcher.logits(request.data, deadline)
            if not np.isfinite(logits).all():  # JSON would carry them as null
                raise Reject(
                    422,
                    f"the model's logits for input '{TENSOR_INPUT}' are not finite (NaN or "
                    "inf): its values are far outside what the model takes; send the "
                    "normalized image, (pixels / 255 - mean) / std as in the model's metadata",
                )
            values = {
                "logits": lambda: logits,
                "probabilities": lambda: self.spec.decision.probabilities(logits),
            }
        else:
            top_k = request.parameters.get("top_k", config.top_k)
            top_k = checked_top_k(top_k, 'parameters "top_k"', 400)
            images = await self.app.decode(request.data, deadline)  # (N, C, H, W) uint8
            answer = await self.app.batcher.predict(images, top_k, deadline)
            predictions, _ = self.app.predictions(answer)
            values = {
                "label": lambda: [(p["labels"] or [""])[0].encode() for p in predictions],
                "prediction": lambda: [dumps(p) for p in predictions],
            }
        head = {"model_name": self.name, "model_version": self.version}
        if request.id is not None:
            head["id"] = request.id
        binary_default = request.parameters.get("binary_data_output") is True
        outputs = []
        for name in request.outputs or offered:
            asked = request.outputs.get(name, {})
            binary = asked.get("binary_data", binary_default) is True
            outputs.append(self._output(offered[name], values[name](), asked, binary))
        return head, outputs

    def _output(self, spec: TensorSpec, data, asked: dict, binary: bool) -> tuple:
        """One output as (name, datatype, shape, data, binary); its classification, if asked."""
        k = asked.get("classification")
        if k is None:
            shape = [len(data), *spec.shape[1:]]
            return spec.name, spec.datatype, shape, data, binary
        if spec.datatype != "FP32" or not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise Reject(
                400,
                f"output '{spec.name}': classification={k!r}; ask an integer "
                ">= 1 of logits or probabilities",
            )
        k = min(k, self.spec.num_classes)
        strings = classification(np.asarray(data), k, list(self.spec.classes))
        return spec.name, "BYTES", [len(data), k], strings, binary


async def _error(send_message, status: int, detail: str, headers=None) -> None:
    await send(send_message, status, dumps({"error": detail}), headers)
