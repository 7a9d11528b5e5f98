"""Thread sanity for CPU training with DataLoader worker processes.

torch already runs each DataLoader worker process with one intra-op thread
(``torch.utils.data`` calls ``torch.set_num_threads(1)`` in every worker), but the main
(training) process keeps all its threads, so busy workers plus that pool oversubscribe the
cores (a user's report: the classic tutorial loop fell from ~1,000 to ~200 img/s on a busy
2-core machine). The cap: the main process keeps ``cores - num_workers`` intra-op threads
(at least one). It is off by default (``cap=False``, ``data.cap_threads``): paired rounds of
``benchmarks/train_throughput.py`` (``pil_cap`` vs ``pil``, docs/benchmarks.md) found it 18%
slower on a quiet 2-core machine (all 5 rounds) and 3.1x faster only when other jobs already
loaded the cores. Without the cap the oversubscription is still logged, with the fix.

``configure_threads`` applies and logs the choice; ``worker_init_fn`` goes into the
DataLoader. Neither does anything on an accelerator or without workers.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

_last_plan: tuple[int, int, int] | None = None  # (cores, num_workers, threads) last logged


def available_cores() -> int:
    """Cores this process may run on (respects taskset/cgroup affinity where the OS reports it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def worker_init_fn(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: Lightning's worker seeding, when it was asked for.

    Workers already run one intra-op thread (torch sets it). Setting a ``worker_init_fn``
    stops Lightning from adding its own worker seeding, so this does that seeding when
    ``seed_everything(..., workers=True)`` asked for it.
    """
    if int(os.environ.get("PL_SEED_WORKERS", "0")):
        from lightning_fabric.utilities.seed import pl_worker_init_function

        pl_worker_init_function(worker_id)


def plan_threads(num_workers: int, cores: int) -> int:
    """Intra-op threads for the main process so that workers + threads <= cores (>= 1)."""
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}.")
    return max(1, cores - num_workers)


def configure_threads(
    num_workers: int, on_cpu: bool = True, cores: int | None = None, cap: bool = False
) -> int:
    """Plan (and with ``cap=True`` apply) torch's intra-op threads beside ``num_workers`` workers.

    Returns the number of intra-op threads in effect. Logs one line with the choice (once
    per distinct choice) and warns when workers alone already use every core.
    """
    import torch  # here: the server's config asks available_cores and never needs torch

    global _last_plan
    if not on_cpu or num_workers == 0:
        return torch.get_num_threads()
    cores = cores or available_cores()
    threads = torch.get_num_threads()
    if cap:
        threads = min(threads, plan_threads(num_workers, cores))
        torch.set_num_threads(threads)
    plan = (cores, num_workers, threads)
    if plan != _last_plan:
        _last_plan = plan
        log.info(
            "CPU threads: %d cores, %d DataLoader workers x 1 thread, %d intra-op thread(s) "
            "for training.",
            cores,
            num_workers,
            threads,
        )
        if num_workers >= cores:  # the workers alone fill the cores
            log.warning(
                "num_workers=%d oversubscribes %d cores (workers + %d training thread(s) = %d); "
                "lower data.num_workers to %d, set data.cap_threads=true if other jobs share "
                "the cores, or use pipeline=tensor, which needs no workers.",
                num_workers,
                cores,
                threads,
                num_workers + threads,
                max(0, cores - 1),
            )
    return threads
