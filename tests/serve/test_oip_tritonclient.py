"""Triton's own HTTP client (``tritonclient[http]``, the ``dev`` extra) against a real
``python -m lightning_cls.serve`` process: health, metadata, and 128 images asked both as
encoded BYTES and as FP32 tensors, 8 requests in flight, each top-1 equal to ``/predict``'s.

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

httpclient = pytest.importorskip("tritonclient.http")

REQUESTS = 128


def _images(artifacts) -> torch.Tensor:
    """The 16 validation images and 112 random ones: uint8 (128, 3, 12, 12)."""
    generator = torch.Generator().manual_seed(0)
    noise = torch.randint(
        0, 256, (REQUESTS - 16, 3, 12, 12), dtype=torch.uint8, generator=generator
    )
    return torch.cat([artifacts.images[:16], noise])


def test_tritonclient_asks_health_metadata_and_128_images_with_predicts_top1(server, artifacts):
    name = httpx.get(server.url + "/info").json()["model"]["name"]
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"), concurrency=8)
    try:
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready(name) and not client.is_model_ready("no_such_model")
        assert "binary_tensor_data" in client.get_server_metadata()["extensions"]
        metadata = client.get_model_metadata(name)
        spec = artifacts.spec
        assert metadata["inputs"][0]["shape"] == [-1, *spec.input_shape]
        assert metadata["parameters"]["classes"] == list(spec.classes)
        images = _images(artifacts)
        encoded = [base64.b64encode(png_bytes(image)).decode() for image in images]
        top1 = [  # /predict's, 64 images a request (the server's batch_timeout is 50 ms)
            prediction["labels"][0]
            for start in range(0, REQUESTS, 64)
            for prediction in httpx.post(
                server.url + "/predict", json={"images": encoded[start : start + 64]}
            ).json()["predictions"]
        ]
        by_image = [client.async_infer(name, [_encoded(image)]) for image in images]
        tensors = spec.preprocess(images.numpy()).astype(np.float32)  # (128, 3, 12, 12)
        by_tensor = [client.async_infer(name, [_tensor(x)]) for x in tensors]
        image_top1 = [
            json.loads(call.get_result().as_numpy("predictions")[0])["labels"][0]
            for call in by_image
        ]
        tensor_top1 = [
            spec.classes[int(call.get_result().as_numpy("logits")[0].argmax())]
            for call in by_tensor
        ]
    finally:
        client.close()
    assert image_top1 == top1 and tensor_top1 == top1
    assert len(set(top1)) > 1  # the images are not all one class: the check can fail
    wrong = httpclient.InferInput("input", [1, *spec.input_shape], "FP64")
    wrong.set_data_from_numpy(tensors[:1].astype(np.float64))
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    with pytest.raises(httpclient.InferenceServerException, match="has datatype 'FP64'"):
        client.infer(name, [wrong])
    client.close()


def _encoded(image: torch.Tensor):
    tensor = httpclient.InferInput("image", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([png_bytes(image)], dtype=object))
    return tensor


def _tensor(x: np.ndarray):
    tensor = httpclient.InferInput("input", [1, *x.shape], "FP32")
    tensor.set_data_from_numpy(x[None])
    return tensor
