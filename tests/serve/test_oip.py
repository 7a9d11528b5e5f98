"""The Open Inference Protocol v2 (serve/oip.py) through the official ``tritonclient.http``
client against a real server, and every runtime's tensors through an in-process app."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import numpy as np
import pytest
import torch
from server_process import ServerProcess

from helpers import png_bytes
from lightning_cls.inference import load_artifact
from lightning_cls.serve.app import ServeApp
from lightning_cls.serve.config import ServeConfig
from lightning_cls.serve.metrics import ServeMetrics

httpclient = pytest.importorskip("tritonclient.http", exc_type=ImportError)
from tritonclient.utils import InferenceServerException  # noqa: E402 (after the skip)

N_IMAGES, PER_CALL = 128, 64


@pytest.fixture(scope="module")
def oip_server(artifacts, tmp_path_factory):
    proc = ServerProcess(
        artifacts.paths["onnx"], tmp_path_factory.mktemp("oip_run"), "serve.max_batch_size=64"
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(oip_server):
    with httpclient.InferenceServerClient(oip_server.url.removeprefix("http://")) as client:
        yield client


@pytest.fixture(scope="module")
def images(artifacts) -> torch.Tensor:
    """128 uint8 (3, 12, 12) images: the 16 validation images, then seeded noise."""
    noise = torch.randint(
        0,
        256,
        (N_IMAGES - 16, 3, 12, 12),
        dtype=torch.uint8,
        generator=torch.Generator().manual_seed(0),
    )
    return torch.cat([artifacts.images, noise])


@pytest.fixture(scope="module")
def predicted(oip_server, images) -> list[dict]:
    """``/predict``'s answer for each image (JSON batches of 64)."""
    answers = []
    for start in range(0, N_IMAGES, PER_CALL):
        b64 = [base64.b64encode(png_bytes(i)).decode() for i in images[start : start + PER_CALL]]
        reply = httpx.post(oip_server.url + "/predict", json={"images": b64}, timeout=60)
        assert reply.status_code == 200, reply.text
        answers += reply.json()["predictions"]
    return answers


@pytest.fixture(scope="module")
def name(oip_server) -> str:
    """The served model's name, as ``/info`` says."""
    return httpx.get(oip_server.url + "/info").json()["model"]["name"]


def test_health_and_metadata(client, name, artifacts):
    assert client.is_server_live() and client.is_server_ready()
    server = client.get_server_metadata()
    assert server["name"] == "lightning_cls" and "binary_tensor_data" in server["extensions"]
    assert client.is_model_ready(name)
    meta = client.get_model_metadata(name)
    assert meta["inputs"][0] == {"name": "input", "datatype": "FP32", "shape": [-1, 3, 12, 12]}
    assert meta["inputs"][1] == {"name": "image", "datatype": "BYTES", "shape": [-1]}
    assert [o["name"] for o in meta["outputs"]] == [
        "logits",
        "probabilities",
        "label",
        "prediction",
    ]
    assert meta["outputs"][0]["shape"] == [-1, len(artifacts.spec.classes)]
    assert meta["parameters"]["classes"] == list(artifacts.spec.classes)
    assert not client.is_model_ready("nope")  # 404 -> not ready


def _infer(client, name, array: np.ndarray, binary: bool, outputs: tuple[str, ...]):
    kind = "FP32" if array.dtype == np.float32 else "BYTES"
    given = httpclient.InferInput("input" if kind == "FP32" else "image", list(array.shape), kind)
    given.set_data_from_numpy(array, binary_data=binary)
    asked = [httpclient.InferRequestedOutput(o, binary_data=binary) for o in outputs]
    return client.infer(name, [given], outputs=asked)


def test_tensors_answer_as_the_in_process_runtime_and_top1_as_predict(
    client, name, artifacts, images, predicted
):
    predictor = load_artifact(artifacts.paths["onnx"])
    x = predictor.spec.preprocess(images.numpy())  # normalized float32 (128, 3, 12, 12)
    logits = []
    for start, binary in zip(range(0, N_IMAGES, PER_CALL), (True, False)):  # both encodings
        part = np.ascontiguousarray(x[start : start + PER_CALL], np.float32)
        result = _infer(client, name, part, binary, ("logits", "probabilities"))
        logits.append(result.as_numpy("logits"))
        expected = predictor.tta_logits(part)
        np.testing.assert_allclose(logits[-1], expected, atol=1e-5)
        probs = predictor.task.probabilities(expected)
        np.testing.assert_allclose(result.as_numpy("probabilities"), probs, atol=1e-6)
    top1 = [artifacts.spec.classes[i] for i in np.concatenate(logits).argmax(1)]
    assert top1 == [p["labels"][0] for p in predicted]
    assert len(set(top1)) > 1  # the images do not all look alike to the model


def test_encoded_images_answer_like_predict(client, name, images, predicted):
    encoded = [png_bytes(i) for i in images]
    binary = _infer(
        client, name, np.array(encoded[:PER_CALL], dtype=object), True, ("label", "prediction")
    )
    b64 = np.array([base64.b64encode(e).decode() for e in encoded[PER_CALL:]], dtype=object)
    as_json = _infer(client, name, b64, False, ("label", "prediction"))
    # BYTES come back as bytes from the binary extension, as str from JSON
    labels = [*(b.decode() for b in binary.as_numpy("label")), *as_json.as_numpy("label")]
    answers = [*binary.as_numpy("prediction"), *as_json.as_numpy("prediction")]
    assert labels == [p["labels"][0] for p in predicted]
    for answer, expected in zip(answers, predicted):
        got = json.loads(answer)
        assert got["labels"] == expected["labels"]
        np.testing.assert_allclose(got["probs"], expected["probs"], atol=1e-6)


def test_an_unknown_model_is_404_and_a_bad_shape_or_datatype_400(client, name, oip_server):
    x = np.zeros((2, 3, 8, 8), np.float32)
    with pytest.raises(InferenceServerException, match="unknown model 'nope'") as err:
        _infer(client, "nope", x, True, ("logits",))
    assert err.value.status() == "404"
    with pytest.raises(
        InferenceServerException, match=r"shape \[2, 3, 8, 8\].*\[-1, 3, 12, 12\]"
    ) as err:
        _infer(client, name, x, True, ("logits",))
    assert err.value.status() == "400"
    doubles = {
        "inputs": [
            {"name": "input", "datatype": "FP64", "shape": [1, 3, 12, 12], "data": [0.0] * 432}
        ]
    }
    reply = httpx.post(f"{oip_server.url}/v2/models/{name}/infer", json=doubles)
    assert reply.status_code == 400
    assert reply.json() == {"error": "input 'input' has datatype 'FP64'; this model takes FP32"}
    reply = httpx.post(
        f"{oip_server.url}/v2/models/{name}/infer",
        json={"inputs": [{"name": "pixels", "datatype": "FP32", "shape": [1], "data": [0.0]}]},
    )
    assert reply.status_code == 400 and "unknown input 'pixels'" in reply.json()["error"]


@pytest.mark.parametrize("kind", ["ckpt", "weights", "torchscript", "pt2"])
def test_every_runtime_answers_tensors_as_in_process(artifacts, kind):
    path = artifacts.paths[kind]
    config = ServeConfig(artifact=str(path), trust_artifact=True)
    predictor = load_artifact(path, trust_artifact=True)
    app = ServeApp(config, predictor, ServeMetrics(), {"name": "tiny", "version": "7"})
    x = predictor.spec.preprocess(artifacts.images.numpy()[:4])  # (4, 3, 12, 12) float32
    body = {
        "inputs": [
            {
                "name": "input",
                "datatype": "FP32",
                "shape": list(x.shape),
                "data": x.reshape(-1).tolist(),
            }
        ]
    }

    async def ask():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            meta = await client.get("/v2/models/tiny/versions/7")
            return meta, await client.post("/v2/models/tiny/versions/7/infer", json=body)

    try:
        meta, reply = asyncio.run(ask())
    finally:
        app.close()
    assert meta.json()["platform"] == f"lightning_cls_{predictor.kind}"
    assert reply.status_code == 200, reply.text
    (logits, _) = reply.json()["outputs"]
    assert logits["name"] == "logits" and logits["shape"] == [4, 3]
    expected = predictor.tta_logits(x)
    np.testing.assert_allclose(np.reshape(logits["data"], (4, 3)), expected, atol=1e-5)


def test_infer_goes_through_the_admission_and_errors_keep_the_protocol_shape(artifacts):
    path = artifacts.paths["onnx"]
    config = ServeConfig(artifact=str(path), max_body_bytes=2000)
    app = ServeApp(config, load_artifact(path), ServeMetrics(), {"name": "tiny"})
    big = {
        "inputs": [
            {"name": "input", "datatype": "FP32", "shape": [2, 3, 12, 12], "data": [0.5] * 864}
        ]
    }  # over max_body_bytes
    small = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 1], "data": [0.0]}]}

    async def ask():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            replies = [
                await client.post("/v2/models/tiny/infer", json=big),
                await client.get("/v2/models/tiny/infer"),
            ]
            app.draining = True
            replies += [
                await client.get("/v2/health/ready"),
                await client.post("/v2/models/tiny/infer", json=small),
            ]
            return replies

    try:
        too_big, wrong_method, not_ready, draining = asyncio.run(ask())
    finally:
        app.close()
    assert too_big.status_code == 413 and "max_body_bytes=2000" in too_big.json()["error"]
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    assert not_ready.status_code == 503 and "draining" in not_ready.json()["error"]
    assert draining.status_code == 503 and draining.headers["retry-after"] == "1"
