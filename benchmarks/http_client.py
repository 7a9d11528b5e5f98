"""A minimal HTTP/1.1 keep-alive client on asyncio streams, for ``serve_load.py``.

httpx spends ~1 ms of CPU per request in its own machinery; on a 2-core machine the load
generator then competes with the servers it measures and caps every server at the same rate.
This client pre-builds the request bytes and parses only the status line, the headers and a
``Content-Length`` (or chunked) body, so the servers, not the client, set the numbers.
"""

from __future__ import annotations

import asyncio


class Response:
    __slots__ = ("status_code", "content")

    def __init__(self, status_code: int, content: bytes):
        self.status_code, self.content = status_code, content


class Connection:
    """One keep-alive connection; reconnects when the server closed it."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes, content_type: str) -> Response:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode("latin-1")
        for attempt in (0, 1):  # a kept-alive connection the server closed: reconnect once
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            try:
                self.writer.write(head + body)
                await self.writer.drain()
                return await self._read_response()
            except (ConnectionError, asyncio.IncompleteReadError):
                await self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    async def _read_response(self) -> Response:
        reader = self.reader
        status_line = await reader.readline()
        if not status_line:
            raise ConnectionResetError("server closed the connection")
        status = int(status_line.split()[1])
        length, chunked, close = None, False, False
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value:
                chunked = True
            elif name == "connection" and value == "close":
                close = True
        if chunked:
            parts = []
            while size := int((await reader.readline()).split(b";")[0], 16):
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
            await reader.readline()
            content = b"".join(parts)
        else:
            content = await reader.readexactly(length or 0)
        if close:
            await self.close()
        return Response(status, content)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except ConnectionError:
                pass
        self.reader = self.writer = None
