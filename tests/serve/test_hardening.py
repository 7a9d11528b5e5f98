"""Slow and hostile clients against a real ``python -m lightning_cls.serve`` process: stalled
uploads, pixel bombs, long requests, nested JSON, SIGTERM with a stalled upload, SIGKILL of
the parent of several workers."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import signal
import socket
import time

import httpx
import psutil
import pytest
from PIL import Image
from server_process import ServerProcess

from helpers import png_bytes

pytestmark = pytest.mark.slow  # starts server processes


def _stalled_upload(port: int) -> socket.socket:
    """Headers promising 1,000 bytes, then 4 of them, then nothing."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
        b"Content-Length: 1000\r\n\r\n\x89PNG"
    )
    return sock


def _reply(sock: socket.socket) -> tuple[str, dict]:
    """The status line and the JSON body of one response on a raw socket."""
    sock.settimeout(30)
    raw = b""
    while b"\r\n\r\n" not in raw or not raw.rstrip().endswith(b"}"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    return head.decode("latin-1").split("\r\n")[0], json.loads(body)


def _bilevel_png(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("1", (width, height)).save(buf, "PNG", optimize=True)
    return buf.getvalue()


@pytest.fixture(scope="module")
def strict_server(artifacts, tmp_path_factory):
    proc = ServerProcess(
        artifacts.paths["onnx"],
        tmp_path_factory.mktemp("strict"),
        "serve.max_queue=4",
        "serve.body_timeout_s=1.5",
        "serve.max_batch_size=4",
        "serve.max_pixels=4000000",
    )
    yield proc
    proc.stop()


def test_stalled_uploads_hold_no_queue_slot_and_get_408(strict_server, artifacts):
    stalled = [_stalled_upload(strict_server.port) for _ in range(16)]  # 4x max_queue
    try:
        time.sleep(0.3)
        good = {
            "content": png_bytes(artifacts.images[0]),
            "headers": {"Content-Type": "image/png"},
        }
        for _ in range(3):  # one at a time: never more than max_queue admitted
            r = httpx.post(strict_server.url + "/predict", timeout=30, **good)
            assert r.status_code == 200, r.text
        for sock in stalled:
            status, body = _reply(sock)
            assert status.startswith("HTTP/1.1 408"), status
            assert "serve.body_timeout_s=1.5" in body["detail"]
    finally:
        for sock in stalled:
            sock.close()


def test_pixel_bomb_is_refused_from_its_header(strict_server):
    bomb = _bilevel_png(13000, 13000)  # ~20 KB on the wire, 169 megapixels
    assert len(bomb) < 100_000
    rss = psutil.Process(strict_server.proc.pid).memory_info().rss
    started = time.perf_counter()
    r = httpx.post(
        strict_server.url + "/predict",
        content=bomb,
        headers={"Content-Type": "image/png"},
        timeout=30,
    )
    assert r.status_code == 413, r.text
    assert "13000x13000" in r.json()["detail"] and "max_pixels=4000000" in r.json()["detail"]
    assert time.perf_counter() - started < 5
    grown = psutil.Process(strict_server.proc.pid).memory_info().rss - rss
    assert grown < 50e6, f"server grew by {grown / 1e6:.0f} MB on a refused image"


def test_a_big_decode_does_not_stall_the_event_loop(strict_server):
    big = _bilevel_png(1990, 1990)  # under max_pixels: decoded (in a decode thread)

    async def run():
        async with httpx.AsyncClient(base_url=strict_server.url, timeout=60) as client:
            posts = [
                asyncio.create_task(
                    client.post("/predict", content=big, headers={"Content-Type": "image/png"})
                )
                for _ in range(3)
            ]
            await asyncio.sleep(0.05)
            health_times = []
            while not all(p.done() for p in posts):
                started = time.perf_counter()
                assert (await client.get("/health")).status_code == 200
                health_times.append(time.perf_counter() - started)
                await asyncio.sleep(0.01)
            return [p.result() for p in posts], health_times

    responses, health_times = asyncio.run(run())
    assert [r.status_code for r in responses] == [200] * 3
    assert health_times and max(health_times) < 0.5, health_times


def test_max_batch_size_counts_images_not_requests(strict_server, artifacts):
    metrics = lambda: httpx.get(strict_server.url + "/metrics").text  # noqa: E731
    b64 = base64.b64encode(png_bytes(artifacts.images[0])).decode()
    r = httpx.post(strict_server.url + "/predict", json={"images": [b64] * 16}, timeout=30)
    assert r.status_code == 200 and len(r.json()["predictions"]) == 16
    assert r.json()["batch_images"] == 4  # max_batch_size=4: four calls of four
    text = metrics()
    count = int(text.split("lightning_cls_batch_size_count ")[1].split()[0])
    at_most_4 = int(text.split('lightning_cls_batch_size_bucket{le="4"} ')[1].split()[0])
    assert count >= 4 and at_most_4 == count  # no model call held more than 4 images


@pytest.mark.parametrize(
    "body, reason",
    [
        (b'{"images": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested"),
        (b'{"image": "aGk=", "top_k": ' + b"9" * 5000 + b"}", "not valid JSON"),
    ],
)
def test_nested_or_oversized_json_gets_400(strict_server, body, reason):
    r = httpx.post(
        strict_server.url + "/predict",
        content=body,
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 400 and reason in r.json()["detail"], r.text
    assert httpx.get(strict_server.url + "/health").status_code == 200


def test_sigterm_with_a_stalled_upload_exits_within_drain_s(artifacts, tmp_path):
    server = ServerProcess(artifacts.paths["onnx"], tmp_path / "run", "serve.drain_s=2")
    stalled = _stalled_upload(server.port)
    try:
        time.sleep(0.2)
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=10) == 0
        assert time.monotonic() - started < 2.5
    finally:
        stalled.close()


def test_sigkill_of_the_parent_leaves_no_process_serving(artifacts, tmp_path):
    server = ServerProcess(artifacts.paths["onnx"], tmp_path / "run", "serve.threads=1", workers=2)
    workers = [psutil.Process(pid) for pid in server.worker_pids()]
    assert len(workers) == 2 and all(w.ppid() == server.proc.pid for w in workers)
    r = httpx.post(
        server.url + "/predict",
        content=png_bytes(artifacts.images[0]),
        headers={"Content-Type": "image/png"},
    )
    assert r.status_code == 200
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait()
    gone, alive = psutil.wait_procs(workers, timeout=15)
    assert not alive, [w.pid for w in alive]
    with pytest.raises(httpx.TransportError):
        httpx.get(server.url + "/health", timeout=2)
