"""The Open Inference Protocol over gRPC (``serve.grpc_port``, serve/grpc_oip.py), asked by
Triton's own ``tritonclient.grpc``: against a real ``python -m lightning_cls.serve`` process
with both ports open (health, metadata, config and statistics as over HTTP; infer with the
same answers as HTTP and the in-process runtime; each error's gRPC status; the message size
limit, the message timeout and the handshake timeout, each with a control that passes), and
in-process (one ``ServeApp``, HTTP and gRPC sharing its admission queue and draining).

Without grpcio (the ``grpc`` extra) the module skips, saying so, except with ``CI=true``,
where it fails: CI installs the extra (``make install-dev``)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import socket
import time

import httpx
import numpy as np
import pytest
import torch
from in_process import serve_app
from server_process import ServerProcess, free_port

from helpers import png_bytes
from lightning_cls.inference import load_artifact
from lightning_cls.serve.config import ServeConfig

try:
    import grpc
    import tritonclient.grpc as grpcclient
    import tritonclient.grpc.aio as aioclient
    import tritonclient.http as httpclient
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.utils import InferenceServerException
except ImportError as err:
    if os.environ.get("CI") == "true":
        raise ImportError(f"CI=true but {err}: the gRPC tests must run in CI") from err
    pytest.skip(f"grpcio or tritonclient.grpc missing ({err})", allow_module_level=True)


INFER = "/inference.GRPCInferenceService/ModelInfer"


@pytest.fixture(scope="module")
def both(artifacts, tmp_path_factory):
    """ONNX, HTTP and gRPC; small limits the tests reach with a few requests."""
    grpc_port = free_port()
    proc = ServerProcess(
        artifacts.paths["onnx"],
        tmp_path_factory.mktemp("grpc_run"),
        f"serve.grpc_port={grpc_port}",
        "serve.max_batch_size=8",
        "serve.batch_timeout=0.02",
        "serve.max_body_bytes=65536",
        "serve.body_timeout_s=1.5",
        "serve.header_timeout_s=1.5",
        "serve.max_images_per_request=16",
        "serve.top_k=3",
    )
    proc.grpc_url = f"127.0.0.1:{grpc_port}"
    proc.name = httpx.get(proc.url + "/info").json()["model"]["name"]
    yield proc
    assert proc.stop() == 0  # SIGTERM: both ports drained and closed, exit 0


def _tensor(x: np.ndarray) -> grpcclient.InferInput:
    given = grpcclient.InferInput("input", list(x.shape), "FP32")
    given.set_data_from_numpy(x)
    return given


def _http_tensor(x: np.ndarray) -> httpclient.InferInput:
    given = httpclient.InferInput("input", list(x.shape), "FP32")
    given.set_data_from_numpy(x)  # binary
    return given


def _images(encoded: list[bytes]) -> grpcclient.InferInput:
    given = grpcclient.InferInput("image", [len(encoded)], "BYTES")
    given.set_data_from_numpy(np.array(encoded, dtype=object))
    return given


def _status(err: pytest.ExceptionInfo) -> str:
    return err.value.status()  # "StatusCode.INVALID_ARGUMENT"


def test_health_metadata_config_and_stats_answer_as_over_http(both, artifacts):
    http = httpx.Client(base_url=both.url)
    with grpcclient.InferenceServerClient(both.grpc_url) as client:
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready(both.name) and not client.is_model_ready("nope")
        server = client.get_server_metadata(as_json=True)
        metadata = client.get_model_metadata(both.name, as_json=True)
        config = client.get_model_config(both.name, as_json=True)["config"]
        before = client.get_inference_statistics(both.name, as_json=True)["model_stats"][0]
        x = artifacts.spec.preprocess(artifacts.images[:2].numpy()).astype(np.float32)
        client.infer(both.name, [_tensor(x)])
        after = client.get_inference_statistics(both.name, as_json=True)["model_stats"][0]
    assert server == http.get("/v2").json()
    over_http = http.get(f"/v2/models/{both.name}").json()
    assert metadata["inputs"] == [  # int64 shapes are strings in protobuf's JSON
        {**t, "shape": [str(d) for d in t["shape"]]} for t in over_http["inputs"]
    ]
    assert [o["name"] for o in metadata["outputs"]] == [o["name"] for o in over_http["outputs"]]
    assert metadata["versions"] == over_http["versions"]
    config_http = http.get(f"/v2/models/{both.name}/config").json()
    assert config["max_batch_size"] == config_http["max_batch_size"] == 8
    assert [(i["name"], i["data_type"]) for i in config["input"]] == [
        (i["name"], i["data_type"]) for i in config_http["input"]
    ]
    assert config["parameters"]["classes"]["string_value"] == ",".join(artifacts.spec.classes)
    success = lambda stats: int(stats["inference_stats"]["success"].get("count", 0))  # noqa: E731
    assert success(after) == success(before) + 1
    stats_http = http.get(f"/v2/models/{both.name}/stats").json()["model_stats"][0]
    assert stats_http["inference_stats"]["success"]["count"] >= success(after)  # shared counts


def test_infer_answers_as_http_and_the_runtime_on_the_same_tensors(both, artifacts):
    """32 images (the 16 validation ones and 16 noise), one call each, 8 at a time: as FP32
    tensors, logits equal to ONNX Runtime's in this process and the argmax equal to HTTP's
    infer on the same tensors; as encoded BYTES, each label and prediction /predict's."""
    noise = torch.randint(
        0, 256, (16, 3, 12, 12), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    images = torch.cat([artifacts.images[:16], noise])
    tensors = artifacts.spec.preprocess(images.numpy()).astype(np.float32)
    encoded = [png_bytes(image) for image in images]

    async def ask():
        client = aioclient.InferenceServerClient(both.grpc_url)
        gate = asyncio.Semaphore(8)

        async def one(inputs):
            async with gate:
                return await client.infer(both.name, inputs)

        try:
            by_tensor = await asyncio.gather(*(one([_tensor(x[None])]) for x in tensors))
            by_image = await asyncio.gather(*(one([_images([e])]) for e in encoded))
        finally:
            await client.close()
        return by_tensor, by_image

    by_tensor, by_image = asyncio.run(ask())
    logits = np.concatenate([r.as_numpy("logits") for r in by_tensor])
    expected = load_artifact(artifacts.paths["onnx"]).tta_logits(tensors)
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    with httpclient.InferenceServerClient(both.url.removeprefix("http://")) as http:
        http_logits = np.concatenate(  # binary tensors, 16 a request (max_images_per_request)
            [
                http.infer(both.name, [_http_tensor(tensors[i : i + 16])]).as_numpy("logits")
                for i in (0, 16)
            ]
        )
    assert (logits.argmax(1) == http_logits.argmax(1)).all()
    assert len(set(logits.argmax(1))) > 1  # not all one class: the comparison can fail
    b64 = [base64.b64encode(e).decode() for e in encoded]
    predicted = [
        prediction
        for start in (0, 16)  # serve.max_images_per_request=16
        for prediction in httpx.post(
            both.url + "/predict", json={"images": b64[start : start + 16]}, timeout=60
        ).json()["predictions"]
    ]
    assert [r.as_numpy("label")[0].decode() for r in by_image] == [
        p["labels"][0] for p in predicted
    ]
    answers = [json.loads(r.as_numpy("prediction")[0]) for r in by_image]
    assert [a["labels"] for a in answers] == [p["labels"] for p in predicted]


def test_fp32_contents_and_classification_answer_as_raw_bytes_do(both, artifacts):
    """A request with its values in ``contents.fp32_contents`` (not ``raw_input_contents``,
    which tritonclient sends) answers the same logits; ``class_count`` asks Triton's
    classification extension: "value:index:label" strings, the top class first."""
    x = artifacts.spec.preprocess(artifacts.images[:3].numpy()).astype(np.float32)
    request = pb.ModelInferRequest(model_name=both.name, id="req-7")
    tensor = request.inputs.add(name="input", datatype="FP32", shape=list(x.shape))
    tensor.contents.fp32_contents.extend(x.ravel().tolist())
    with grpc.insecure_channel(both.grpc_url) as channel:
        infer = channel.unary_unary(
            INFER,
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        response = infer(request, timeout=30)
    assert response.id == "req-7" and [o.name for o in response.outputs][0] == "logits"
    logits = np.frombuffer(response.raw_output_contents[0], "<f4").reshape(3, -1)
    with grpcclient.InferenceServerClient(both.grpc_url) as client:
        raw = client.infer(both.name, [_tensor(x)]).as_numpy("logits")
        asked = [grpcclient.InferRequestedOutput("probabilities", class_count=2)]
        top2 = client.infer(both.name, [_tensor(x)], outputs=asked).as_numpy("probabilities")
    np.testing.assert_allclose(logits, raw, atol=1e-6)
    assert top2.shape == (3, 2)
    classes = artifacts.spec.classes
    for row, strings in zip(raw, top2):
        value, index, label = strings[0].decode().split(":")
        assert int(index) == row.argmax() and label == classes[row.argmax()]


BAD = [  # (what, input, its shape, datatype, model, gRPC status, message)
    (
        "datatype",
        np.zeros((1, 3, 12, 12)),
        "FP64",
        None,
        "INVALID_ARGUMENT",
        "input 'input' has datatype 'FP64'; this model takes FP32",
    ),
    (
        "shape",
        np.zeros((1, 3, 8, 8)),
        "FP32",
        None,
        "INVALID_ARGUMENT",
        r"shape \[1, 3, 8, 8\]; this model takes \[-1, 3, 12, 12\]",
    ),
    (
        "batch",
        np.zeros((17, 3, 12, 12)),
        "FP32",
        None,
        "INVALID_ARGUMENT",
        r"batch of 17; send 1 to 16 \(serve.max_images_per_request\)",
    ),
    (
        "not finite",
        np.full((1, 3, 12, 12), np.nan),
        "FP32",
        None,
        "INVALID_ARGUMENT",
        "holds 432 values that are not finite",
    ),
    (
        "model",
        np.zeros((1, 3, 12, 12)),
        "FP32",
        "nope",
        "NOT_FOUND",
        "unknown model 'nope'; this server serves",
    ),
]


@pytest.mark.parametrize("what,x,datatype,model,status,match", BAD, ids=[b[0] for b in BAD])
def test_a_bad_infer_gets_the_status_a_triton_client_expects(
    both, what, x, datatype, model, status, match
):
    given = grpcclient.InferInput("input", list(x.shape), datatype)
    given.set_data_from_numpy(x.astype(np.float64 if datatype == "FP64" else np.float32))
    with grpcclient.InferenceServerClient(both.grpc_url) as client:
        with pytest.raises(InferenceServerException, match=match) as err:
            client.infer(model or both.name, [given])
        assert _status(err) == f"StatusCode.{status}"
        control = _tensor(np.zeros((1, 3, 12, 12), np.float32))
        assert client.infer(both.name, [control]).as_numpy("logits").shape == (1, 3)


def test_other_bad_calls_name_the_bad_value(both):
    with grpcclient.InferenceServerClient(both.grpc_url) as client:
        with pytest.raises(InferenceServerException, match="unknown model 'nope'") as err:
            client.get_model_metadata("nope")
        assert _status(err) == "StatusCode.NOT_FOUND"
        with pytest.raises(InferenceServerException, match="version '9'") as err:
            client.get_model_config(both.name, model_version="9")
        assert _status(err) == "StatusCode.NOT_FOUND"
        x = _tensor(np.zeros((1, 3, 12, 12), np.float32))
        unknown = [grpcclient.InferRequestedOutput("label")]
        with pytest.raises(InferenceServerException, match="unknown output 'label'") as err:
            client.infer(both.name, [x], outputs=unknown)
        assert _status(err) == "StatusCode.INVALID_ARGUMENT"
    with grpc.insecure_channel(both.grpc_url) as channel:
        garbage = channel.unary_unary(INFER)  # bytes as they are
        with pytest.raises(grpc.RpcError) as err:
            garbage(b"\xff\xff\xff", timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not a valid ModelInferRequest" in err.value.details()
        two = pb.ModelInferRequest(model_name=both.name, raw_input_contents=[b"", b""])
        two.inputs.add(name="input", datatype="FP32", shape=[1, 3, 12, 12])
        with pytest.raises(grpc.RpcError) as err:
            garbage(two.SerializeToString(), timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "2 raw_input_contents for one input" in err.value.details()


def _padded_png(image: torch.Tensor, size: int) -> bytes:
    """``image`` as a PNG of about ``size`` bytes: a text chunk of random letters (which PNG's
    compression cannot shrink) beside the pixels."""
    from PIL import Image, PngImagePlugin

    letters = np.random.default_rng(0).integers(97, 123, size).astype(np.uint8).tobytes()
    info = PngImagePlugin.PngInfo()
    info.add_text("pad", letters.decode())
    buf = io.BytesIO()
    Image.fromarray(image.permute(1, 2, 0).numpy()).save(buf, "PNG", pnginfo=info)
    return buf.getvalue()


def test_a_message_over_max_body_bytes_is_refused(both, artifacts):
    """serve.max_body_bytes=65536 is gRPC's receive limit: an image of 70 000 bytes is
    refused before any work, one of 60 000 answered (without the limit, gRPC's default
    4 MiB would take both)."""
    big, fits = (_padded_png(artifacts.images[0], n) for n in (70_000, 60_000))
    assert len(big) > 65536 > len(fits)
    with grpcclient.InferenceServerClient(both.grpc_url) as client:
        with pytest.raises(InferenceServerException, match=r"larger than max") as err:
            client.infer(both.name, [_images([big])])
        assert _status(err) == "StatusCode.RESOURCE_EXHAUSTED"
        assert "65536" in err.value.message()
        label = client.infer(both.name, [_images([fits])]).as_numpy("label")[0].decode()
    assert label in artifacts.spec.classes


def test_a_message_slower_than_body_timeout_is_refused_and_a_prompt_one_answered(both):
    """The message of a call (sent here as a one-message stream: the same bytes on the wire)
    must arrive within serve.body_timeout_s=1.5 of the call's start."""
    request = pb.ModelInferRequest(model_name=both.name)
    tensor = request.inputs.add(name="input", datatype="FP32", shape=[1, 3, 12, 12])
    tensor.contents.fp32_contents.extend([0.0] * 432)

    def after(seconds: float):
        time.sleep(seconds)
        yield request

    with grpc.insecure_channel(both.grpc_url) as channel:
        infer = channel.stream_unary(
            INFER,
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            infer(after(4.0), timeout=30)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "within serve.body_timeout_s=1.5 s" in err.value.details()
        assert time.monotonic() - started < 3.5  # refused at 1.5 s, not answered at 4
        assert infer(after(0.2), timeout=30).outputs[0].name == "logits"


def test_a_connection_that_never_says_a_word_is_closed_after_header_timeout(both):
    """serve.header_timeout_s=1.5 bounds the HTTP/2 handshake (gRPC's default: 120 s): the
    server's GOAWAY says so, before serve.keep_alive_s=5 would close an idle connection."""
    host, port = both.grpc_url.split(":")
    received = b""
    with socket.create_connection((host, int(port))) as sock:
        sock.settimeout(10)
        started = time.monotonic()
        while chunk := sock.recv(4096):  # the server's SETTINGS, its GOAWAY, then the close
            received += chunk
        waited = time.monotonic() - started
    assert b"handshake timeout" in received and waited < 3.5


def _raw_http(port: int, head: bytes, timeout: float = 10) -> tuple[str, dict]:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(timeout)
        sock.sendall(head)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data and b"}" in data.split(b"\r\n\r\n", 1)[1]:
                break
    status, body = data.split(b"\r\n", 1)[0].decode(), data.split(b"\r\n\r\n", 1)[1]
    return status, json.loads(body)


def test_config_and_stats_refuse_oversized_bodied_and_slow_clients_as_predict(both):
    """GET config and stats take no body: one declared over serve.max_body_bytes is a 413
    naming it (never read), any other a 400; headers not in within serve.header_timeout_s a
    408 (connections.py). The same GETs without a body are answered (controls)."""
    config, stats = f"/v2/models/{both.name}/config", f"/v2/models/{both.name}/stats"
    status, body = _raw_http(
        both.port,
        f"GET {config} HTTP/1.1\r\nhost: t\r\ncontent-length: 1000000000\r\n\r\n".encode(),
    )
    assert status.startswith("HTTP/1.1 413") and "max_body_bytes=65536" in body["error"]
    status, body = _raw_http(
        both.port, f"GET {stats} HTTP/1.1\r\nhost: t\r\ncontent-length: 5\r\n\r\nhello".encode()
    )
    assert status.startswith("HTTP/1.1 400") and f"GET {stats} takes no body" in body["error"]
    started = time.monotonic()
    status, body = _raw_http(both.port, f"GET {config} HTTP/1.1\r\nhost: t\r\n".encode())
    assert status.startswith("HTTP/1.1 408") and "serve.header_timeout_s=1.5" in body["detail"]
    assert time.monotonic() - started < 5
    assert httpx.get(both.url + config).json()["max_batch_size"] == 8
    assert httpx.get(both.url + stats).status_code == 200


# --- in-process: one ServeApp, both doors -------------------------------------------------
def test_http_and_grpc_share_one_admission_queue_and_draining(artifacts):
    """serve.max_queue=1: while an HTTP infer holds the slot, gRPC's is RESOURCE_EXHAUSTED
    ("queue full"), and the other way round; once free, both answer. Draining: gRPC's infer
    UNAVAILABLE, ready false, live true."""
    from lightning_cls.serve.grpc_oip import GrpcServer

    app, _ = serve_app(artifacts.paths["onnx"], max_queue=1, grpc_port=free_port())
    x = np.zeros((1, 3, 12, 12), np.float32)
    body = {
        "inputs": [
            {
                "name": "input",
                "shape": [1, 3, 12, 12],
                "datatype": "FP32",
                "data": x.ravel().tolist(),
            }
        ]
    }
    logits = app.batcher.logits

    async def run():
        server = GrpcServer(app, app.config)
        await server.start()
        client = aioclient.InferenceServerClient(f"127.0.0.1:{app.config.grpc_port}")
        transport = httpx.ASGITransport(app=app)
        http = httpx.AsyncClient(transport=transport, base_url="http://t")
        release = asyncio.Event()

        async def held(tensor, deadline=None):
            await release.wait()
            return await logits(tensor, deadline)

        async def grpc_infer():
            try:
                return (await client.infer("tiny", [_tensor(x)])).as_numpy("logits").shape
            except InferenceServerException as err:
                return err.status(), err.message()

        try:
            app.batcher.logits = held
            holding = asyncio.create_task(http.post("/v2/models/tiny/infer", json=body))
            while app.in_flight == 0:
                await asyncio.sleep(0.01)
            refused_grpc = await grpc_infer()
            release.set()
            held_http = (await holding).status_code
            release.clear()
            holding = asyncio.create_task(grpc_infer())
            while app.in_flight == 0:
                await asyncio.sleep(0.01)
            refused_http = await http.post("/v2/models/tiny/infer", json=body)
            release.set()
            held_grpc = await holding
            app.batcher.logits = logits
            free = await grpc_infer(), (await http.post("/v2/models/tiny/infer", json=body))
            app.draining = True
            draining = await grpc_infer()
            health = await client.is_server_live(), await client.is_server_ready()
            model_ready = await client.is_model_ready("tiny")
            stats = (await http.get("/v2/models/tiny/stats")).json()["model_stats"][0]
        finally:
            await client.close()
            await http.aclose()
            await server.stop(0)
        return (
            refused_grpc,
            held_http,
            refused_http,
            held_grpc,
            free,
            draining,
            health,
            model_ready,
            stats,
        )

    try:
        (
            refused_grpc,
            held_http,
            refused_http,
            held_grpc,
            free,
            draining,
            health,
            model_ready,
            stats,
        ) = asyncio.run(run())
    finally:
        app.close()
    assert refused_grpc[0] == "StatusCode.RESOURCE_EXHAUSTED"
    assert "queue full (1 requests in flight)" in refused_grpc[1]
    assert held_http == 200
    assert refused_http.status_code == 503 and "queue full" in refused_http.json()["error"]
    assert held_grpc == (1, 3)
    assert free[0] == (1, 3) and free[1].status_code == 200
    assert draining[0] == "StatusCode.UNAVAILABLE" and "draining" in draining[1]
    assert health == (True, False) and model_ready is False
    assert stats["inference_stats"]["success"]["count"] == 4  # both doors' 200s, counted once
    assert stats["inference_stats"]["fail"]["count"] == 3


def test_grpc_port_is_checked(artifacts):
    onnx = str(artifacts.paths["onnx"])
    for bad in (8000, 80, "50051", True):
        with pytest.raises(ValueError, match=rf"serve.grpc_port={bad!r} must be a port"):
            ServeConfig(artifact=onnx, port=8000, grpc_port=bad)
    assert ServeConfig(artifact=onnx, grpc_port=50051).grpc_port == 50051
