"""``Batcher``: dynamic batching on the event loop, the model in one dedicated thread.

Requests hand in decoded uint8 images and await their probabilities. While no model call is
running, whatever is waiting goes into the next call at once (no wait unless
``batch_timeout`` > 0); while one runs, new requests queue and form the next batch, so batches
grow with the load and exactly one batch is in flight. The call runs in a single thread (ONNX
Runtime, OpenVINO and PyTorch release the GIL), leaving the event loop free for HTTP.
``max_batch_size`` counts images: requests are taken whole while they fit, and a request
longer than ``max_batch_size`` is split into several model calls. The Open Inference
Protocol's float tensors (``logits``: already normalized, the model's own input) queue here
too and run in calls of their own, in turn with the images'. Each request's labels are
what the model's task decides (``spec.decision``, in the model thread): its ``top_k`` classes,
or for a multi-label model every label whose probability reaches its threshold, and with a
rejection rule (``spec.decision.reject``) whether each image is ``unknown``, and with a conformal rule
(``spec.decision.conformal``) each image's prediction set. Images and
probabilities stay numpy arrays here: with an ONNX or OpenVINO model the server never imports
torch (``Predictor`` answers in the kind it is given).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from lightning_cls.inference.predictor import Predictor
from lightning_cls.serve.metrics import ServeMetrics


class Expired(Exception):
    """The request was not answered within ``timeout`` seconds of its admission."""


class Batcher:
    def __init__(
        self,
        predictor: Predictor,
        metrics: ServeMetrics,
        max_batch_size: int = 32,
        batch_timeout: float = 0.0,
        timeout: float = 10.0,
    ):
        self.predictor, self.metrics = predictor, metrics
        self.max_batch_size, self.batch_timeout, self.timeout = (
            max_batch_size,
            batch_timeout,
            timeout,
        )
        self.task = predictor.spec.decision
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="lightning_cls-model")
        # (images (N, C, H, W) uint8, top_k, future, queued at (perf_counter)); top_k None:
        # normalized float32 input
        self._waiting: deque = deque()
        self._busy = False
        self._timer: asyncio.TimerHandle | None = None

    async def predict(
        self, images: np.ndarray, top_k: int, deadline: float | None = None
    ) -> tuple[list, list, list | None, list | None, int]:
        """uint8 (N, C, H, W) -> (the predicted labels' probabilities per image, their class
        indices, (unknown, score) per image by the model's rejection rule or None without one,
        the class indices of each image's prediction set or None without a conformal rule,
        images in the largest model call that served it); ``Expired`` after
        ``timeout`` seconds, or at ``deadline`` (``time.monotonic()``: the server's clock runs
        from admission, decoding included). ``top_k`` is capped at the number of classes."""
        return await self._queued(images, min(top_k, self.predictor.spec.num_classes), deadline)

    async def logits(self, x: np.ndarray, deadline: float | None = None) -> tuple[np.ndarray, int]:
        """Normalized float32 (N, C, H, W), the model's own input -> (logits (N, K) with the
        artifact's TTA, images in the largest model call that served it); batched with other
        such requests (never with images: those are normalized in the model thread)."""
        return await self._queued(x, None, deadline)

    async def _queued(self, x: np.ndarray, top_k: int | None, deadline: float | None):
        """Queue ``x`` (``top_k`` None: a normalized tensor) and await its answer."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        delay = self.timeout if deadline is None else deadline - time.monotonic()
        expiry = loop.call_later(max(0.0, delay), _expire, future)
        self._waiting.append((x, top_k, future, time.perf_counter()))
        self._start(loop)
        try:
            return await future
        finally:
            expiry.cancel()

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._busy or not self._waiting:
            return
        if self.batch_timeout and sum(len(item[0]) for item in self._waiting) < self.max_batch_size:
            # Wait a little for more, once per batch: a request arriving in the window joins
            # it (it does not cut the wait short); a full batch goes at once.
            if self._timer is None:
                self._timer = loop.call_later(self.batch_timeout, self._fire, loop)
            return
        self._fire(loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:  # a full batch before the window ended
            self._timer.cancel()
            self._timer = None
        batch, images, tensors = [], 0, None  # tensors: whether this call runs float input
        while self._waiting:
            item = self._waiting[0]
            if item[2].done():  # expired (504 already sent) or the client went away
                self._waiting.popleft()
                continue
            if batch and (
                (item[1] is None) != tensors or images + len(item[0]) > self.max_batch_size
            ):
                break
            batch.append(self._waiting.popleft())
            images += len(item[0])
            tensors = item[1] is None
        if not batch:
            return
        self._busy = True
        started = time.perf_counter()  # the statistics extension's queue, then compute_infer
        self.metrics.observe_stage(
            "queue", sum(started - item[3] for item in batch) / len(batch), len(batch)
        )
        pixels = batch[0][0] if len(batch) == 1 else np.concatenate([item[0] for item in batch])
        requests = [(len(item[0]), item[1]) for item in batch]  # (images, top_k) each
        run = self._run_tensors if tensors else self._run
        call = loop.run_in_executor(self.thread, run, pixels, requests)
        call.add_done_callback(lambda done: self._finish(loop, batch, done, started))

    def _run(self, pixels: np.ndarray, requests: list[tuple[int, int]]) -> list[tuple]:
        """In the model thread: probabilities, then each request's labels as the task decides
        them: per request (probabilities per image, class indices per image)."""
        chunks = []  # (logits, features or None) per model batch
        for start in range(0, len(pixels), self.max_batch_size):
            part = pixels[start : start + self.max_batch_size]  # (n, C, H, W) uint8
            chunks.append(self.predictor.image_outputs(part, batch_size=len(part)))
            self.metrics.batch_size.observe(len(part))
        logits, features = (
            chunks[0] if len(chunks) == 1 else [_stacked(c) for c in zip(*chunks)]
        )  # (N, K) float32; (N, D) for a feature-space rejection rule, else None
        probs = self.task.probabilities(logits)  # after the model's temperature
        verdicts = self.task.verdicts(logits, features)  # None without a rejection rule
        sets = self.task.sets(probs)  # None without a conformal rule
        answers, start = [], 0
        for n, top_k in requests:
            indices, values = self.task.decide(probs[start : start + n], top_k)
            judged = None if verdicts is None else verdicts[start : start + n]
            members = None if sets is None else sets[start : start + n]
            answers.append((values, indices, judged, members))
            start += n
        return answers

    def _run_tensors(self, x: np.ndarray, requests: list[tuple[int, None]]) -> list[tuple]:
        """In the model thread: normalized float32 input -> per request (its logits,)."""
        chunks = []
        for start in range(0, len(x), self.max_batch_size):
            part = x[start : start + self.max_batch_size]  # (n, C, H, W) float32
            chunks.append(self.predictor.tta_logits(part))  # (n, K)
            self.metrics.batch_size.observe(len(part))
        logits = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
        bounds = np.cumsum([0] + [n for n, _ in requests])
        return [(logits[a:b],) for a, b in zip(bounds[:-1], bounds[1:])]

    def _finish(self, loop, batch: list, done: asyncio.Future, started: float) -> None:
        self._busy = False
        error = done.exception()
        answers = done.result() if error is None else [None] * len(batch)
        if error is None:  # each request of the call waited for all of it
            self.metrics.observe_stage("compute_infer", time.perf_counter() - started, len(batch))
        total = sum(len(item[0]) for item in batch)
        largest_call = min(total, self.max_batch_size)  # a long batch ran as several calls
        for (_, _, future, _), answer in zip(batch, answers):
            if future.done():
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result((*answer, largest_call))
        self._start(loop)

    def close(self) -> None:
        self.thread.shutdown(wait=True)


def _expire(future: asyncio.Future) -> None:
    if not future.done():
        future.set_exception(Expired())


def warm_up(predictor: Predictor, max_batch_size: int) -> None:
    """One call at batch 1 and one at ``max_batch_size``: the first requests are not slow."""
    for size in sorted({1, max_batch_size}):
        shape = (size, *predictor.spec.input_shape)
        predictor.predict_images(np.zeros(shape, np.uint8), size)


def _stacked(parts):
    """Row batches -> one array (None when the runtime gave none)."""
    return None if parts[0] is None else np.concatenate(parts)
