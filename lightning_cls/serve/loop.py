"""``BlockingBatchLoop``: LitServe's batched loop with a batch collector that blocks while idle.

LitServe 0.2's collector (``litserve.loops.base.collate_requests``) polls its request queue (a
``multiprocessing.Manager`` queue: every ``get`` is a round trip to the manager process) with
1 ms timeouts for as long as the worker lives, idle or not. On a small CPU that polling takes
cycles from the HTTP process and the model, and measured slower than batch-1 serving
(``docs/benchmarks.md``, "Serving"). This collector waits for the first request in one blocking
``get`` (up to ``idle_wait_s``), then takes more until ``batch_timeout`` has passed since that
first request or ``max_batch_size`` are in hand, then whatever is already queued (no wait), up to
``max_batch_size``. Requests older than the LitAPI's ``request_timeout`` are answered 504 as in
LitServe. It plugs in through ``LitAPI(loop=...)``, LitServe's documented way to change a loop.
"""

from __future__ import annotations

import time
from queue import Empty

from litserve.loops.base import _SENTINEL_VALUE, _StopLoopError
from litserve.loops.simple_loops import BatchedLoop
from litserve.utils import LitAPIStatus, LoopResponseType


class BlockingBatchLoop(BatchedLoop):
    def __init__(self, idle_wait_s: float = 1.0):
        super().__init__()
        self.idle_wait_s = idle_wait_s  # how often an idle worker wakes up (shutdown checks)

    def get_batch_requests(self, lit_api, request_queue, transport) -> tuple[list, list]:
        payloads, timed_out = [], []
        apply_timeout = lit_api.request_timeout not in (-1, False)

        def take(item) -> None:
            if item == _SENTINEL_VALUE:
                raise _StopLoopError()
            response_queue_id, uid, timestamp, x_enc = item
            self.put_response(
                transport=transport,
                response_queue_id=response_queue_id,
                uid=uid,
                response_data=(),
                status=LitAPIStatus.START,
                response_type=LoopResponseType.REGULAR,
            )
            if apply_timeout and time.monotonic() - timestamp > lit_api.request_timeout:
                timed_out.append((response_queue_id, uid))
            else:
                payloads.append((response_queue_id, uid, x_enc))

        try:
            take(request_queue.get(timeout=self.idle_wait_s))  # idle: one blocking wait
        except Empty:
            return payloads, timed_out
        deadline = time.monotonic() + lit_api.batch_timeout
        while len(payloads) < lit_api.max_batch_size:
            remaining = deadline - time.monotonic()
            try:
                item = (
                    request_queue.get(timeout=remaining)
                    if remaining > 0
                    else request_queue.get_nowait()  # window over: only what already waits
                )
            except Empty:
                break
            take(item)
        return payloads, timed_out
