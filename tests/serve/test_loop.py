"""BlockingBatchLoop: batch collection without LitServe's 1 ms polling, same contract."""

from __future__ import annotations

import queue
import threading
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("litserve")

from litserve.loops.base import _SENTINEL_VALUE, _StopLoopError

from lightning_cls.serve.loop import BlockingBatchLoop


def _api(max_batch_size=4, batch_timeout=0.05, request_timeout=10.0):
    return SimpleNamespace(
        max_batch_size=max_batch_size, batch_timeout=batch_timeout, request_timeout=request_timeout
    )


def _request(uid: str, age: float = 0.0):
    return (0, uid, time.monotonic() - age, {"x": uid})


def test_takes_what_is_queued_up_to_max_batch_size():
    q = queue.Queue()
    for i in range(6):
        q.put(_request(f"r{i}"))
    payloads, timed_out = BlockingBatchLoop().get_batch_requests(_api(), q, transport=None)
    assert [uid for _, uid, _ in payloads] == ["r0", "r1", "r2", "r3"] and timed_out == []
    assert q.qsize() == 2  # the rest waits for the next batch


def test_waits_batch_timeout_after_the_first_request_for_more():
    q = queue.Queue()
    q.put(_request("first"))
    threading.Timer(0.05, q.put, args=(_request("late"),)).start()
    started = time.monotonic()
    payloads, _ = BlockingBatchLoop().get_batch_requests(_api(batch_timeout=0.3), q, None)
    assert [uid for _, uid, _ in payloads] == ["first", "late"]
    assert 0.25 < time.monotonic() - started < 2.0  # the window ran to its end (2 < 4)


def test_idle_worker_blocks_instead_of_polling_and_stops_on_the_sentinel():
    q = queue.Queue()
    started = time.monotonic()
    assert BlockingBatchLoop(idle_wait_s=0.2).get_batch_requests(_api(), q, None) == ([], [])
    assert time.monotonic() - started >= 0.2
    q.put(_SENTINEL_VALUE)
    with pytest.raises(_StopLoopError):
        BlockingBatchLoop().get_batch_requests(_api(), q, None)


def test_requests_older_than_the_request_timeout_are_set_aside_for_504():
    q = queue.Queue()
    q.put(_request("stale", age=5.0))
    q.put(_request("fresh"))
    payloads, timed_out = BlockingBatchLoop().get_batch_requests(
        _api(request_timeout=1.0, batch_timeout=0.0), q, None
    )
    assert [uid for _, uid, _ in payloads] == ["fresh"] and timed_out == [(0, "stale")]
