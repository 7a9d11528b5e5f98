"""A real ``python -m lightning_cls.serve`` process on a free localhost port (serving the
session's ``artifacts``, tests/conftest.py)."""

from __future__ import annotations

import pytest
from server_process import ServerProcess


@pytest.fixture(scope="module")
def server(artifacts, tmp_path_factory):
    """ONNX artifact; small limits so the tests can reach them with few requests."""
    proc = ServerProcess(
        artifacts.paths["onnx"],
        tmp_path_factory.mktemp("serve_run"),
        "serve.max_batch_size=8",
        "serve.batch_timeout=0.05",
        "serve.max_queue=16",
        "serve.max_body_bytes=65536",
        "serve.top_k=3",
    )
    yield proc
    proc.stop()
