"""A ``ServeApp`` in this process, asked through httpx's ASGI transport (no port, no server
process): for the tests that look at answers, not at sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from lightning_cls.inference import load_artifact
from lightning_cls.serve.app import ServeApp
from lightning_cls.serve.config import ServeConfig
from lightning_cls.serve.metrics import ServeMetrics


def serve_app(path: Path, spec: dict | None = None, **overrides) -> tuple[ServeApp, object]:
    """(the app serving ``path`` as model 'tiny' version 'abc123', its predictor); ``spec``
    fills or replaces the artifact's input description (e.g. a temperature)."""
    config = ServeConfig(artifact=str(path), trust_artifact=True, spec=spec or {}, **overrides)
    predictor = load_artifact(path, spec=spec, trust_artifact=True)
    info = {"name": "tiny", "version": "abc123"}
    return ServeApp(config, predictor, ServeMetrics(), info), predictor


async def asked(client: httpx.AsyncClient, calls: list[tuple]) -> list[httpx.Response]:
    return [await client.request(m, p, **kw) for m, p, kw in calls]


def ask(app: ServeApp, calls: list[tuple], close: bool = True) -> list[httpx.Response]:
    """(method, path, kwargs) each, in order, against ``app``; the app closed after unless
    ``close`` is False."""

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await asked(client, calls)

    try:
        return asyncio.run(run())
    finally:
        if close:
            app.close()
