"""Triton's own HTTP client (``tritonclient[http]``, the ``dev`` extra) against a real
``python -m lightning_cls.serve`` process: health, metadata, and 128 images asked one request
each, both as encoded BYTES and as FP32 tensors, 8 requests in flight, half of them in the
binary-data extension and half in JSON: each top-1 equal to ``/predict``'s, the tensors'
logits equal to the in-process runtime's.

KServe's ``InferenceRESTClient`` is not tested: ``kserve`` 0.21.0 requires pandas<3,
protobuf<7 and psutil<6, which would downgrade this project's pins (docs/guides/serving.md)."""

from __future__ import annotations

import base64
import json

import httpx
import numpy as np
import pytest
import torch

from helpers import png_bytes
from lightning_cls.inference import load_artifact

httpclient = pytest.importorskip("tritonclient.http", exc_type=ImportError)

REQUESTS = 128


def _images(artifacts) -> torch.Tensor:
    """The 16 validation images and 112 seeded noise images: uint8 (128, 3, 12, 12)."""
    generator = torch.Generator().manual_seed(0)
    noise = torch.randint(
        0, 256, (REQUESTS - 16, 3, 12, 12), dtype=torch.uint8, generator=generator
    )
    return torch.cat([artifacts.images[:16], noise])


def test_tritonclient_asks_health_metadata_and_128_images_with_predicts_top1(server, artifacts):
    name = httpx.get(server.url + "/info").json()["model"]["name"]
    spec = artifacts.spec
    images = _images(artifacts)
    encoded = [png_bytes(image) for image in images]
    b64 = [base64.b64encode(e).decode() for e in encoded]
    predicted = [  # /predict's, 64 images a request
        prediction
        for start in range(0, REQUESTS, 64)
        for prediction in httpx.post(
            server.url + "/predict", json={"images": b64[start : start + 64]}, timeout=60
        ).json()["predictions"]
    ]
    tensors = spec.preprocess(images.numpy()).astype(np.float32)  # (128, 3, 12, 12)
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"), concurrency=8)
    try:
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready(name) and not client.is_model_ready("no_such_model")
        assert "binary_tensor_data" in client.get_server_metadata()["extensions"]
        metadata = client.get_model_metadata(name)
        by_image = [  # even: raw bytes in the binary extension; odd: base64 strings in JSON
            _infer(client, name, "image", np.array([e if i % 2 == 0 else b], dtype=object), i)
            for i, (e, b) in enumerate(zip(encoded, b64))
        ]
        by_tensor = [_infer(client, name, "input", x[None], i) for i, x in enumerate(tensors)]
        image_results = [call.get_result() for call in by_image]
        logits = np.concatenate([call.get_result().as_numpy("logits") for call in by_tensor])
    finally:
        client.close()
    assert metadata["inputs"][0] == {
        "name": "input",
        "datatype": "FP32",
        "shape": [-1, *spec.input_shape],
    }
    assert metadata["inputs"][1] == {"name": "image", "datatype": "BYTES", "shape": [-1]}
    assert metadata["parameters"]["classes"] == list(spec.classes)
    top1 = [p["labels"][0] for p in predicted]
    assert len(set(top1)) > 1  # the images are not all one class: the check can fail
    # BYTES come back as bytes from the binary extension, as str from JSON
    labels = [_text(r.as_numpy("label")[0]) for r in image_results]
    answers = [json.loads(r.as_numpy("prediction")[0]) for r in image_results]
    assert labels == top1 and [a["labels"] for a in answers] == [p["labels"] for p in predicted]
    for answer, expected in zip(answers, predicted):
        np.testing.assert_allclose(answer["probs"], expected["probs"], atol=1e-6)
    np.testing.assert_allclose(
        logits, load_artifact(artifacts.paths["onnx"]).tta_logits(tensors), atol=1e-5
    )
    assert [spec.classes[i] for i in logits.argmax(1)] == top1


def test_tritonclient_sees_a_wrong_datatype_or_shape_as_a_400_naming_it(server, artifacts):
    name = httpx.get(server.url + "/info").json()["model"]["name"]
    shape = [1, *artifacts.spec.input_shape]
    doubles = httpclient.InferInput("input", shape, "FP64")
    doubles.set_data_from_numpy(np.zeros(shape, np.float64))
    small = httpclient.InferInput("input", [1, 3, 8, 8], "FP32")
    small.set_data_from_numpy(np.zeros((1, 3, 8, 8), np.float32))
    fits = httpclient.InferInput("input", shape, "FP32")
    fits.set_data_from_numpy(np.zeros(shape, np.float32))
    with httpclient.InferenceServerClient(server.url.removeprefix("http://")) as client:
        with pytest.raises(httpclient.InferenceServerException, match="has datatype 'FP64'") as e:
            client.infer(name, [doubles])
        assert e.value.status() == "400"
        with pytest.raises(
            httpclient.InferenceServerException, match=r"shape \[1, 3, 8, 8\].*\[-1, 3, 12, 12\]"
        ) as e:
            client.infer(name, [small])
        assert e.value.status() == "400"
        with pytest.raises(httpclient.InferenceServerException, match="unknown model 'nope'"):
            client.infer("nope", [fits])
        assert client.infer(name, [fits]).as_numpy("logits").shape == (1, 3)  # control


def _infer(client, name: str, input_name: str, array: np.ndarray, i: int):
    binary = i % 2 == 0
    given = httpclient.InferInput(
        input_name, list(array.shape), "BYTES" if input_name == "image" else "FP32"
    )
    given.set_data_from_numpy(array, binary_data=binary)
    outputs = ("label", "prediction") if input_name == "image" else ("logits",)
    asked = [httpclient.InferRequestedOutput(o, binary_data=binary) for o in outputs]
    return client.async_infer(name, [given], outputs=asked)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value
