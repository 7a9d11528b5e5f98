"""``python -m lightning_cls.serve`` as a real process: batching, parity with in-process
predict, a status per bad input while good requests succeed, overload, SIGTERM drain, 504."""

from __future__ import annotations

import asyncio
import base64
import io
import time

import httpx
import numpy as np
import psutil
import pytest
import torch
from PIL import Image
from server_process import ServerProcess

from helpers import png_bytes
from lightning_cls.inference import load_artifact

pytestmark = pytest.mark.slow  # starts server processes (~5-10 s each on 2 idle cores)


def _post_all(url: str, requests: list[dict]) -> list[httpx.Response]:
    """Send every request at once (one connection each), return the responses in order."""

    async def run():
        limits = httpx.Limits(max_connections=len(requests))
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
            return await asyncio.gather(*(client.post("/predict", **r) for r in requests))

    return asyncio.run(run())


def _png(image: torch.Tensor) -> dict:
    return {"content": png_bytes(image), "headers": {"Content-Type": "image/png"}}


def test_concurrent_requests_are_batched_and_equal_in_process_predict(server, artifacts):
    images = artifacts.images[:8]
    requests = [_png(img) for img in images[:6]]
    b64 = [base64.b64encode(png_bytes(img)).decode() for img in images[6:]]
    requests.append({"json": {"images": b64, "top_k": 2}})
    responses = _post_all(server.url, requests)
    assert [r.status_code for r in responses] == [200] * 7, [r.text for r in responses]
    bodies = [r.json() for r in responses]
    assert max(b["batch_images"] for b in bodies) > 1  # several requests shared a model call
    expected = load_artifact(artifacts.paths["onnx"]).predict_images(images)
    served = [p for b in bodies for p in b["predictions"]]
    for probs, got in zip(expected, served):
        top = probs.topk(len(got["labels"]))
        assert got["labels"] == [artifacts.spec.classes[i] for i in top.indices]
        np.testing.assert_allclose(got["probs"], top.values.numpy(), atol=1e-5)
    assert len(served[-1]["labels"]) == 2 and len(served[0]["labels"]) == 3  # top_k, default
    assert bodies[0]["model"]["runtime"] == "onnx" and len(bodies[0]["model"]["version"]) == 12


def test_each_bad_input_gets_its_status_while_a_good_request_succeeds(server, artifacts):
    good = _png(artifacts.images[0])
    gray = io.BytesIO()
    Image.fromarray(artifacts.images[1][0].numpy(), "L").resize((40, 30)).save(gray, "PNG")
    cases = [
        (good, 200),
        ({"content": b"not an image", "headers": {"Content-Type": "image/jpeg"}}, 400),
        (
            {
                "content": png_bytes(artifacts.images[2])[:60],
                "headers": {"Content-Type": "image/png"},
            },
            400,
        ),  # truncated
        ({"content": b"hello", "headers": {"Content-Type": "text/plain"}}, 415),
        ({"content": b"\0" * 70_000, "headers": {"Content-Type": "image/png"}}, 413),
        ({"content": b"{not json", "headers": {"Content-Type": "application/json"}}, 400),
        ({"json": {"images": []}}, 422),
        ({"json": {"images": ["aGk="] * 65}}, 422),  # max_images_per_request=64
        ({"json": {"image": "%%%"}}, 400),
        ({"json": {"image": base64.b64encode(good["content"]).decode(), "top_k": 0}}, 422),
        ({"content": gray.getvalue(), "headers": {"Content-Type": "image/png"}}, 200),  # converted
        (good, 200),
    ]
    responses = _post_all(server.url, [c for c, _ in cases])
    assert [r.status_code for r in responses] == [s for _, s in cases], [r.text for r in responses]
    assert "not a readable image" in responses[1].json()["detail"]
    assert "max_body_bytes=65536" in responses[4].json()["detail"]
    assert "Content-Type 'text/plain'" in responses[3].json()["detail"]
    assert '"images" must be a list of 1 to 64' in responses[7].json()["detail"]
    assert responses[0].json()["predictions"] == responses[-1].json()["predictions"]


def test_a_chunked_body_over_max_body_bytes_gets_413_counted_while_reading(server, artifacts):
    def chunks():  # no Content-Length: httpx sends Transfer-Encoding: chunked
        for _ in range(10):
            yield b"\0" * 10_000

    r = httpx.post(
        server.url + "/predict",
        content=chunks(),
        headers={"Content-Type": "image/png"},
        timeout=30,
    )
    assert r.request.headers["transfer-encoding"] == "chunked"
    assert r.status_code == 413, r.text
    assert "at least" in r.json()["detail"] and "max_body_bytes=65536" in r.json()["detail"]
    assert _post_all(server.url, [_png(artifacts.images[0])])[0].status_code == 200


def test_overload_gets_503_with_retry_after_and_nothing_crashes(server, artifacts):
    requests = [_png(artifacts.images[i % 8]) for i in range(96)]  # 6x max_queue=16
    responses = _post_all(server.url, requests)
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 503}, codes
    assert codes.count(503) > 0 and codes.count(200) >= 16
    assert all(r.headers["retry-after"] == "1" for r in responses if r.status_code == 503)
    assert httpx.get(server.url + "/health").status_code == 200
    assert _post_all(server.url, [requests[0]])[0].status_code == 200
    metrics = httpx.get(server.url + "/metrics").text
    assert f'lightning_cls_requests_total{{status="503"}} {codes.count(503)}' in metrics
    assert "lightning_cls_queue_depth 0" in metrics
    assert 'lightning_cls_batch_size_bucket{le="+Inf"}' in metrics


def test_info_describes_model_and_batching_without_machine_paths(server, artifacts):
    text = httpx.get(server.url + "/info").text
    assert str(artifacts.paths["onnx"].parent) not in text  # no absolute paths
    info = httpx.get(server.url + "/info").json()["model"]
    assert info["artifact"] == info["config"]["artifact"] == artifacts.paths["onnx"].name
    assert info["spec"]["classes"] == list(artifacts.spec.classes)
    assert info["spec"]["tta"]["flip"] is True
    assert info["runtime"] == "onnx"
    assert info["config"]["max_batch_size"] == 8 and info["config"]["host"] == "127.0.0.1"
    assert info["config"]["threads"] >= 1


def test_sigterm_drains_accepted_requests(artifacts, tmp_path):
    # A long batch window keeps the requests in flight when SIGTERM arrives.
    server = ServerProcess(
        artifacts.paths["ckpt"],
        tmp_path / "run",
        "serve.max_batch_size=64",
        "serve.batch_timeout=1.5",
        "serve.drain_s=8",
    )

    async def run():
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            pending = [
                asyncio.create_task(client.post("/predict", **_png(img)))
                for img in artifacts.images[:6]
            ]
            await asyncio.sleep(0.5)  # accepted, waiting for the batch to fill
            helpers.extend(psutil.Process(server.proc.pid).children())  # resource tracker
            server.proc.send_signal(15)
            await asyncio.sleep(0.2)
            health = await client.get("/health")  # a new connection while draining
            late = await client.post("/predict", **_png(artifacts.images[0]))
            return health, late, await asyncio.gather(*pending)

    helpers = []
    health, late, responses = asyncio.run(run())
    assert health.status_code == 503 and "draining" in health.json()["detail"]
    assert late.status_code == 503 and "draining" in late.json()["detail"]
    assert late.headers["retry-after"] == "1"
    assert [r.status_code for r in responses] == [200] * 6
    assert server.proc.wait(timeout=8) == 0
    with pytest.raises(httpx.TransportError):
        httpx.get(server.url + "/health", timeout=2)
    psutil.wait_procs(helpers, timeout=10)  # the tracker writes its warnings as it exits
    assert "leaked semaphore" not in server.log.read_text()  # ServeMetrics.close


def test_a_request_not_answered_within_the_timeout_gets_504(artifacts, tmp_path):
    # Requests of 64 images at max_batch_size=1 run as 64 model calls each (6 forwards with
    # flip + translate TTA): the model thread is busy far longer than serve.timeout.
    server = ServerProcess(
        artifacts.paths["ckpt"],
        tmp_path / "run",
        "serve.timeout=0.2",
        "serve.max_batch_size=1",
    )
    try:
        b64 = base64.b64encode(png_bytes(artifacts.images[0])).decode()
        big = {"json": {"images": [b64] * 64}}
        responses = _post_all(server.url, [big] * 4)
        codes = [r.status_code for r in responses]
        assert set(codes) <= {200, 504} and codes.count(504) >= 2, codes
        late = next(r for r in responses if r.status_code == 504)
        assert "serve.timeout=0.2" in late.json()["detail"]
        # The server goes on serving: a single image is answered once the late requests' work
        # is gone (a few tries, as one image's 6 TTA forwards can pass 0.2 s on a busy machine).
        codes = [_post_all(server.url, [_png(artifacts.images[1])])[0].status_code]
        while codes[-1] != 200 and len(codes) < 5:
            time.sleep(0.5)
            codes.append(_post_all(server.url, [_png(artifacts.images[1])])[0].status_code)
        assert codes[-1] == 200, codes
    finally:
        assert server.stop() == 0
