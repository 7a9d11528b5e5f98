"""``ServeMetrics``: counters shared by every server process, rendered as Prometheus text.

With ``serve.workers=N`` the N server processes share the port, so a scrape reaches one of
them at random and a per-process counter would show that process's share. The counters live
in shared memory created by the parent before it spawns the workers, which receive them as
``Process`` arguments (multiprocessing allows that while spawning). With one worker they are
the same objects in one process.
"""

from __future__ import annotations

import bisect
import multiprocessing as mp
import time
from collections.abc import Sequence

STATUSES = (200, 400, 404, 413, 415, 422, 500, 503, 504)  # any other code counts as "other"
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


MAX_WORKERS = 64  # inference worker processes one server can report
# Triton's statistics extension: (count, ns) per stage, summed over worker processes. success
# and fail are whole requests (/predict and the OIP's infer, as ``observe_request`` sees them);
# queue and compute_infer each request a model call answered (``Batcher``).
STAGES = ("success", "fail", "queue", "compute_infer")


class _Histogram:
    """Cumulative-on-render histogram: per-bucket counts, a count and a sum in shared memory."""

    def __init__(self, ctx, buckets: Sequence[float]):
        self.buckets = tuple(buckets)
        self.counts = ctx.Array("q", len(self.buckets) + 1)  # last slot: above every bucket
        self.sum = ctx.Value("d", 0.0, lock=False)  # guarded by counts' lock

    def observe(self, value: float) -> None:
        with self.counts.get_lock():
            self.counts[bisect.bisect_left(self.buckets, value)] += 1
            self.sum.value += value

    def render(self, name: str, help_text: str) -> list[str]:
        lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        with self.counts.get_lock():
            counts, total_sum = list(self.counts), self.sum.value
        running = 0
        for bound, count in zip((*self.buckets, "+Inf"), counts):
            running += count
            lines.append(f'{name}_bucket{{le="{bound}"}} {running}')
        lines += [f"{name}_sum {total_sum:.6f}", f"{name}_count {running}"]
        return lines


class ServeMetrics:
    """Requests by status, request latency, images per model call, and requests in flight."""

    def __init__(self):
        ctx = mp.get_context("spawn")
        self.status_counts = ctx.Array("q", len(STATUSES) + 1)  # last slot: other codes
        self.latency = _Histogram(ctx, LATENCY_BUCKETS_S)
        self.batch_size = _Histogram(ctx, BATCH_BUCKETS)
        self.in_flight = ctx.Value("i", 0)  # admitted /predict and /explain requests, unanswered
        # Process ids of the server processes that loaded and warmed up their model.
        self.worker_pids = ctx.Array("i", MAX_WORKERS)
        # (count, ns) per STAGES entry, then the last success (ms since the epoch)
        self.stages = ctx.Array("q", 2 * len(STAGES) + 1)

    def close(self) -> None:
        """Unlink the counters' semaphores now. A spawn-context lock is unlinked by a finalizer
        when it is collected or at a normal interpreter exit; a drained server leaves through
        ``os._exit`` (``server.exit_now``), which runs none, and the resource tracker then
        warned of 'leaked semaphore objects' at every SIGTERM. Dropping the last references
        runs the finalizers; the metrics are unusable afterwards."""
        for name in (
            "status_counts",
            "latency",
            "batch_size",
            "in_flight",
            "worker_pids",
            "stages",
        ):
            self.__dict__.pop(name, None)

    def worker_ready(self, pid: int) -> None:
        with self.worker_pids.get_lock():
            slot = list(self.worker_pids).index(0)  # a free slot (ServeConfig caps workers)
            self.worker_pids[slot] = pid

    def queue_depth(self, change: int) -> None:
        """Count admitted ``/predict`` and ``/explain`` requests in and out (summed over worker
        processes): the one queue both take a slot in."""
        with self.in_flight.get_lock():
            self.in_flight.value += change

    def observe_request(self, status: int, seconds: float) -> None:
        slot = STATUSES.index(status) if status in STATUSES else len(STATUSES)
        with self.status_counts.get_lock():
            self.status_counts[slot] += 1
        self.latency.observe(seconds)
        self.observe_stage("success" if status == 200 else "fail", seconds)
        if status == 200:
            self.stages[-1] = time.time_ns() // 1_000_000

    def observe_stage(self, stage: str, seconds: float, requests: int = 1) -> None:
        """``requests`` more in ``stage`` (``STAGES``), ``seconds`` each."""
        slot = 2 * STAGES.index(stage)
        with self.stages.get_lock():
            self.stages[slot] += requests
            self.stages[slot + 1] += requests * int(seconds * 1e9)

    def model_stats(self) -> dict:
        """Triton's ``$model_stat`` less name and version: ``last_inference`` (ms since the
        epoch), ``inference_count`` (images through the model) and ``execution_count`` (model
        calls), from the batch-size histogram, and ``inference_stats``. The model thread
        normalizes, runs and decides in one call: ``compute_input`` and ``compute_output`` are
        inside ``compute_infer`` (their ns 0)."""
        with self.stages.get_lock():
            values = list(self.stages)
        with self.batch_size.counts.get_lock():
            executions, images = sum(self.batch_size.counts), int(self.batch_size.sum.value)
        stats = {
            stage: {"count": values[2 * i], "ns": values[2 * i + 1]}
            for i, stage in enumerate(STAGES)
        }
        computed = stats["compute_infer"]["count"]
        stats["compute_input"] = stats["compute_output"] = {"count": computed, "ns": 0}
        return {
            "last_inference": values[-1],
            "inference_count": images,
            "execution_count": executions,
            "inference_stats": stats,
            "batch_stats": [],
        }

    def status_count(self, status: int) -> int:
        return self.status_counts[STATUSES.index(status)]

    def render(self) -> str:
        """The Prometheus text exposition format (version 0.0.4)."""
        lines = [
            "# HELP lightning_cls_requests_total Answered /predict requests by HTTP status.",
            "# TYPE lightning_cls_requests_total counter",
        ]
        with self.status_counts.get_lock():
            counts = list(self.status_counts)
        for code, count in zip((*map(str, STATUSES), "other"), counts):
            lines.append(f'lightning_cls_requests_total{{status="{code}"}} {count}')
        lines += self.latency.render(
            "lightning_cls_request_latency_seconds",
            "Time from receiving a /predict request to answering it.",
        )
        lines += self.batch_size.render(
            "lightning_cls_batch_size", "Images per model call (dynamic batching at work)."
        )
        lines += [
            "# HELP lightning_cls_queue_depth /predict and /explain requests admitted and not yet "
            "answered.",
            "# TYPE lightning_cls_queue_depth gauge",
            f"lightning_cls_queue_depth {self.in_flight.value}",
            "# HELP lightning_cls_worker_info Server processes ready to serve.",
            "# TYPE lightning_cls_worker_info gauge",
        ]
        lines += [f'lightning_cls_worker_info{{pid="{pid}"}} 1' for pid in self.worker_pids if pid]
        return "\n".join(lines) + "\n"
