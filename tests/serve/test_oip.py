"""The Open Inference Protocol v2 (serve/oip.py) on an in-process ``ServeApp``, every runtime:
metadata, FP32 tensors equal to the in-process predictor, images as BYTES equal to /predict,
the binary-data and classification extensions, and each error's status and message."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import struct

import httpx
import numpy as np
import pytest
from in_process import ask as _ask
from in_process import serve_app as _app

from helpers import png_bytes
from lightning_cls.serve.app import ServeApp
from lightning_cls.serve.config import ServeConfig
from lightning_cls.serve.metrics import ServeMetrics

KINDS = ["onnx", "torchscript", "pt2", "ckpt", "openvino"]


@pytest.fixture(scope="module")
def openvino_ir(artifacts, tmp_path_factory):
    pytest.importorskip("openvino")
    from lightning_cls.export.exporter import ExportConfig, export_model

    out = tmp_path_factory.mktemp("oip_openvino")
    config = ExportConfig(formats=["onnx", "openvino"])
    return export_model(artifacts.module.net, artifacts.spec, out, config).paths["openvino"]


def _path(artifacts, kind, request):
    if kind == "openvino":
        return request.getfixturevalue("openvino_ir")
    return artifacts.paths[kind]


def _tensor_request(x: np.ndarray, **extra) -> dict:
    tensor = {"name": "input", "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}
    return {"inputs": [tensor], **extra}


def _image_request(images) -> dict:
    data = [base64.b64encode(png_bytes(image)).decode() for image in images]
    return {"inputs": [{"name": "image", "shape": [len(data)], "datatype": "BYTES", "data": data}]}


def _outputs(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    return {o["name"]: o for o in response.json()["outputs"]}


@pytest.mark.parametrize("kind", KINDS)
def test_each_runtime_answers_metadata_tensors_and_images_like_in_process(artifacts, kind, request):
    app, predictor = _app(_path(artifacts, kind, request))
    spec = predictor.spec
    images = artifacts.images[:4].numpy()  # uint8 (4, 3, 12, 12)
    x = np.ascontiguousarray(spec.preprocess(images), np.float32)  # the model's own input
    png = {"content": png_bytes(artifacts.images[0]), "headers": {"content-type": "image/png"}}
    meta, ready, infer, by_image, predict = _ask(
        app,
        [
            ("GET", "/v2/models/tiny", {}),
            ("GET", "/v2/models/tiny/versions/abc123/ready", {}),
            ("POST", "/v2/models/tiny/infer", {"json": _tensor_request(x, id="r1")}),
            ("POST", "/v2/models/tiny/infer", {"json": _image_request(artifacts.images[:1])}),
            ("POST", "/predict", png),
        ],
    )
    metadata = meta.json()
    assert metadata["inputs"][0] == {"name": "input", "datatype": "FP32", "shape": [-1, 3, 12, 12]}
    assert metadata["parameters"]["classes"] == list(spec.classes)
    assert metadata["versions"] == ["abc123"] and ready.json() == {"name": "tiny", "ready": True}
    outputs = _outputs(infer)
    assert infer.json()["id"] == "r1" and outputs["logits"]["shape"] == [4, spec.num_classes]
    logits = np.array(outputs["logits"]["data"], np.float32).reshape(4, -1)
    np.testing.assert_allclose(logits, predictor.tta_logits(x), rtol=0, atol=1e-5)
    probs = np.array(outputs["probabilities"]["data"]).reshape(4, -1)
    np.testing.assert_allclose(probs, predictor.predict_images(images), atol=1e-5)
    answered = _outputs(by_image)
    prediction = json.loads(answered["prediction"]["data"][0])
    assert prediction == predict.json()["predictions"][0]
    assert answered["label"]["data"] == [prediction["labels"][0]]


def test_binary_tensors_and_classification_as_triton_sends_and_reads_them(artifacts):
    app, predictor = _app(artifacts.paths["onnx"])
    x = np.random.default_rng(0).standard_normal((3, 3, 12, 12), dtype=np.float32)
    head = {
        "inputs": [
            {"name": "input", "shape": [3, 3, 12, 12], "datatype": "FP32",
             "parameters": {"binary_data_size": x.nbytes}},
        ],
        "outputs": [
            {"name": "logits", "parameters": {"binary_data": True}},
            {"name": "probabilities", "parameters": {"classification": 2}},
        ],
    }  # fmt: skip
    text = json.dumps(head).encode()
    headers = {"inference-header-content-length": str(len(text))}
    (answer,) = _ask(
        app,
        [("POST", "/v2/models/tiny/infer", {"content": text + x.tobytes(), "headers": headers})],
    )
    assert answer.status_code == 200, answer.text
    length = int(answer.headers["inference-header-content-length"])
    outputs = {o["name"]: o for o in json.loads(answer.content[:length])["outputs"]}
    logits = np.frombuffer(answer.content[length:], "<f4").reshape(3, -1)
    assert outputs["logits"]["parameters"]["binary_data_size"] == logits.nbytes
    np.testing.assert_allclose(logits, predictor.tta_logits(x), atol=1e-5)
    top = outputs["probabilities"]
    assert top["datatype"] == "BYTES" and top["shape"] == [3, 2]
    best = np.argmax(logits, axis=1)
    classes = predictor.spec.classes
    assert [s.split(":")[1:] for s in top["data"][::2]] == [[str(i), classes[i]] for i in best]


def _binary_images(images) -> tuple[bytes, dict]:
    blob = b"".join(struct.pack("<I", len(b)) + b for b in map(png_bytes, images))
    head = {"inputs": [{"name": "image", "shape": [len(images)], "datatype": "BYTES",
                        "parameters": {"binary_data_size": len(blob)}}],
            "parameters": {"binary_data_output": True}}  # fmt: skip
    text = json.dumps(head).encode()
    return text + blob, {"inference-header-content-length": str(len(text))}


BAD = [
    ("GET", "/v2/models/other", {}, 404, r"unknown model 'other'; this server serves 'tiny'"),
    ("GET", "/v2/models/tiny/versions/9/ready", {}, 404, "unknown model 'tiny' version '9'"),
    ("GET", "/v2/models/tiny/infer", {}, 405, "takes POST, not GET"),
    ("GET", "/v2/nothing", {}, 404, "no Open Inference Protocol endpoint"),
    ("POST", "/v2/models/tiny/infer", {"content": b"{"}, 400, "request JSON is not valid"),
    ("POST", "/v2/models/tiny/infer", {"content": b"{}", "headers": {"content-encoding": "gzip"}},
     400, "compressed request bodies are not supported"),
    ("POST", "/v2/models/tiny/infer", {"json": {"inputs": [{"name": "pixels"}]}}, 400,
     r"unknown input 'pixels'; this model takes 'input' \(FP32\) or 'image' \(BYTES\)"),
    ("POST", "/v2/models/tiny/infer",
     {"json": {"inputs": [{"name": "input", "shape": [1, 3, 8, 8], "datatype": "FP32",
                           "data": [0.0] * 192}]}},
     400, r"input 'input' has shape \[1, 3, 8, 8\]; this model takes \[-1, 3, 12, 12\]"),
    ("POST", "/v2/models/tiny/infer",
     {"json": {"inputs": [{"name": "input", "shape": [1, 3, 12, 12], "datatype": "FP64",
                           "data": [0.0] * 432}]}},
     400, "input 'input' has datatype 'FP64'; this model takes FP32"),
    ("POST", "/v2/models/tiny/infer",
     {"json": {"inputs": [{"name": "input", "shape": [1, 3, 12, 12], "datatype": "FP32",
                           "data": [0.0] * 400}]}},
     400, r"400 numbers for shape \[1, 3, 12, 12\], which holds 432"),
    ("POST", "/v2/models/tiny/infer",
     {"json": {**_image_request([]), "outputs": [{"name": "logits"}]}}, 400,
     "holds a batch of 0"),
    ("POST", "/v2/models/tiny/infer",
     {"json": {"inputs": [{"name": "image", "shape": [1], "datatype": "BYTES", "data": ["!"]}]}},
     400, "input 'image': an element is not base64"),
]  # fmt: skip


def test_each_bad_request_gets_its_status_and_a_protocol_error_naming_the_field(artifacts):
    app, _ = _app(artifacts.paths["onnx"])
    image = _image_request(artifacts.images[:1])
    extra = [
        ("POST", "/v2/models/tiny/infer", {"json": {**image, "outputs": [{"name": "logits"}]}},
         400, "unknown output 'logits' for input 'image'; it answers label, prediction"),
        ("POST", "/v2/models/tiny/infer", {"json": {**image, "parameters": {"top_k": 0}}},
         400, 'parameters "top_k" must be an integer >= 1, got 0'),
    ]  # fmt: skip
    cases = BAD + extra
    answers = _ask(app, [(m, p, kw) for m, p, kw, _, _ in cases])
    for (_, path, _, status, message), answer in zip(cases, answers):
        assert answer.status_code == status, (path, answer.text)
        assert set(answer.json()) == {"error"}
        assert re.search(message, answer.json()["error"]), answer.json()
        if status == 405:
            assert answer.headers["allow"] == "POST"


def test_infer_goes_through_admission_queue_pixels_and_draining(artifacts):
    """The body limit's and the pixel budget's 413 before decoding, the queue's 503 (with
    Retry-After), and draining's 503 on ready come back in the protocol's error shape; a good
    binary image request is answered after them (negative control)."""
    app, _ = _app(artifacts.paths["onnx"], max_queue=1, max_pixels=100, max_body_bytes=2000)
    body, headers = _binary_images(artifacts.images[:1])  # 12 x 12 = 144 pixels > 100
    tensor = _tensor_request(np.full((1, 3, 12, 12), 0.123, np.float32))  # > 2000 bytes
    small = ServeApp(
        ServeConfig(artifact=str(artifacts.paths["onnx"])),
        app.batcher.predictor,
        ServeMetrics(),
        {"name": "tiny"},
    )

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            infer = lambda: client.post("/v2/models/tiny/infer", content=body, headers=headers)  # noqa: E731
            too_big = await infer()
            too_long = await client.post("/v2/models/tiny/infer", json=tensor)
            app.in_flight = 1  # the one queue slot taken
            full = await infer()
            app.in_flight, app.draining = 0, True
            draining = await client.get("/v2/health/ready")
            live = await client.get("/v2/health/live")
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=small), base_url="http://t"
        ) as client:
            good = await client.post("/v2/models/tiny/infer", content=body, headers=headers)
        return too_big, too_long, full, draining, live, good

    try:
        too_big, too_long, full, draining, live, good = asyncio.run(run())
    finally:
        app.close()
        small.close()
    assert too_big.status_code == 413 and "max_pixels=100" in too_big.json()["error"]
    assert too_long.status_code == 413 and "max_body_bytes=2000" in too_long.json()["error"]
    assert full.status_code == 503 and full.headers["retry-after"] == "1"
    assert "queue full" in full.json()["error"]
    assert draining.status_code == 503 and live.status_code == 200
    assert good.status_code == 200
    length = int(good.headers["inference-header-content-length"])
    label, prediction = json.loads(good.content[:length])["outputs"]
    tail = good.content[length:]
    assert len(tail) == sum(o["parameters"]["binary_data_size"] for o in (label, prediction))
    cut = label["parameters"]["binary_data_size"]  # BYTES: each a length, then the bytes
    (size,) = struct.unpack_from("<I", tail, cut)
    assert size == len(tail) - cut - 4
    answer = json.loads(tail[cut + 4 :])  # one prediction, as /predict's
    assert tail[4:cut].decode() == answer["labels"][0]


def test_tensor_requests_are_batched_together_and_counted_in_metrics(artifacts):
    """Four one-image tensor requests in flight at once: one model call of 4 (the batcher's
    50 ms window; a request arriving in it used to cut it short), each answer its own rows;
    /metrics counts them as 200s."""
    app, predictor = _app(artifacts.paths["onnx"], batch_timeout=0.05, max_batch_size=8)
    x = predictor.spec.preprocess(artifacts.images[:4].numpy()).astype(np.float32)

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            asks = [
                client.post("/v2/models/tiny/infer", json=_tensor_request(row[None])) for row in x
            ]
            return await asyncio.gather(*asks)

    try:
        replies = asyncio.run(run())
    finally:
        app.close()
    logits = np.concatenate(
        [np.reshape(_outputs(r)["logits"]["data"], (1, -1)) for r in replies]
    ).astype(np.float32)
    np.testing.assert_allclose(logits, predictor.tta_logits(x), atol=1e-5)
    calls = app.metrics.batch_size
    assert (sum(calls.counts), calls.sum.value) == (1, 4.0)  # one call of 4, not 4 of 1
    assert app.metrics.status_count(200) == 4
