"""Slow and idle clients at the connection level: a header timeout and a connection cap.

uvicorn (0.29 to 0.55 checked) has neither: its keep-alive timer starts only after a response,
so a client that opens a connection and sends half its headers holds a socket and a file
descriptor for as long as it likes, and ``limit_concurrency`` answers 503 only once a request's
headers are complete, which such a client never reaches. ``guarded_protocol`` subclasses the
HTTP protocol uvicorn would pick (httptools, else h11) and adds, per connection:

- **header timeout**: a connection whose next request's headers are not complete within
  ``header_timeout_s`` of its opening (or of that request's first byte) is answered 408 and
  closed (closed without a word when it sent nothing);
- **connection cap**: a connection beyond ``max_connections`` open ones is answered 503 with
  ``Retry-After`` and closed at once, before it can hold anything.

A request whose headers are in is the app's from then on (``body_timeout_s``, ``timeout``); an
idle keep-alive connection is uvicorn's (``timeout_keep_alive`` = ``serve.keep_alive_s``).
No public uvicorn hook covers this: ``Config(http=<protocol class>)`` is the documented way
to choose the protocol, and the subclass reads two attributes both of uvicorn's protocols keep
(``connections``, the set of open ones, and ``cycle``, the current request). A change there
fails tests/serve/test_budgets.py.
"""

from __future__ import annotations

import asyncio
import json


def _response(status: int, reason: str, detail: str, extra: str = "") -> bytes:
    body = json.dumps({"detail": detail}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n{extra}"
        f"connection: close\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


def guarded_protocol(
    header_timeout_s: float, max_connections: int, retry_after_s: int
) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class with the header timeout and the connection cap."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    too_slow = _response(
        408,
        "Request Timeout",
        f"request headers not received within serve.header_timeout_s={header_timeout_s} s",
    )
    too_many = _response(
        503,
        "Service Unavailable",
        f"too many open connections (serve.max_connections={max_connections}); retry later",
        f"retry-after: {retry_after_s}\r\n",
    )

    class GuardedProtocol(AutoHTTPProtocol):
        _header_timer: asyncio.TimerHandle | None = None
        _armed_cycle = None  # the request current when the timer was armed
        _partial = False  # bytes of a request arrived whose headers are not complete

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.write(too_many)
                transport.close()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self.cycle is None or self.cycle.response_complete:  # a new request's bytes
                self._partial = True
                if self._header_timer is None or self._armed_cycle is not self.cycle:
                    self._arm()  # its clock starts at its first byte
            super().data_received(data)

        def connection_lost(self, exc) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            self._armed_cycle = self.cycle
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_late)

        def _headers_late(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or self.cycle is not self._armed_cycle:
                return  # a request's headers came in since: the app's timeouts take over
            if self._partial:
                self.transport.write(too_slow)
            self.transport.close()

    return GuardedProtocol
