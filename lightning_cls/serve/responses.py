"""Pre-serialised answers: ``dumps`` (orjson where installed) and ``send``, one ASGI response."""

from __future__ import annotations

import json
from typing import Any

try:
    from orjson import dumps
except ImportError:  # pragma: no cover - orjson is in the serve extra

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()


JSON = "application/json"


async def send(
    send_message,
    status: int,
    body: bytes,
    headers: dict[str, str] | None = None,
    content_type: str = JSON,
) -> None:
    """``body`` with ``status``, its Content-Type and Content-Length, and ``headers``."""
    raw = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send_message({"type": "http.response.start", "status": status, "headers": raw})
    await send_message({"type": "http.response.body", "body": body})
