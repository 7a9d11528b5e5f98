"""The JSON summary of ``serve_load.py``: medians over rounds, per-round ratios, and the
ResNet-18 served-vs-in-process check (with the in-process drift within and across rounds)."""

from __future__ import annotations

import os
import statistics

from paired import cpu_name, summarize


def resnet18_check(results: list[dict]) -> dict:
    """Served ResNet-18 over in-process ONNX Runtime, the in-process figure being the mean of
    the measurements just before and just after the served one in the same round. Serving does
    more work on the same cores, so a round where it beats in-process by more than the noise
    (the in-process drift within that round or across rounds, at least 5%) means the
    measurement is broken: ``ok`` is then false and the run fails."""
    inproc = [(r["resnet18_inprocess_before"] + r["resnet18_inprocess_after"]) / 2 for r in results]
    within = [
        abs(r["resnet18_inprocess_after"] - r["resnet18_inprocess_before"]) / m
        for r, m in zip(results, inproc)
    ]
    across = (max(inproc) - min(inproc)) / statistics.median(inproc)
    ratios = [r["resnet18_c32"]["rps"] / m for r, m in zip(results, inproc)]
    noise = [max(w, across, 0.05) for w in within]
    return {
        "inprocess_per_round": inproc,
        "drift_within_round": within,
        "drift_across_rounds": across,
        "served_over_inprocess": summarize(ratios),
        "noise_per_round": noise,
        "ok": all(ratio <= 1 + n for ratio, n in zip(ratios, noise)),
    }


_SKIPPED = object()


def _unless_skipped(fn, names: list[str]):
    """``fn(*measurements)``, or ``_SKIPPED`` when one of them was not taken."""
    return lambda *ns: fn(*ns) if all(n in names for n in ns) else _SKIPPED


def summary(results: list[dict], over: dict, args, plan: list) -> dict:
    """The last line of ``serve_load.py`` (``plan``: its PLAN, the measurements in order)."""
    check = resnet18_check(results)
    names = [name for name, _, _ in plan if name in results[0]]
    med = {n: statistics.median(r[n]["rps"] for r in results) for n in names}
    ratio = lambda a, b: summarize([r[a]["rps"] / r[b]["rps"] for r in results])  # noqa: E731
    p99 = lambda n: statistics.median(r[n]["p99_ms"] for r in results)  # noqa: E731
    if args.quick:  # a measurement --quick skipped (QUICK_SKIP) leaves its keys out
        med = {n: med.get(n, _SKIPPED) for n, _, _ in plan}
        ratio = _unless_skipped(ratio, names)
        p99 = _unless_skipped(p99, names)
    out = {
        "quick": args.quick,
        "rounds": args.rounds,
        "seconds": args.seconds,
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
        "echo_rps_c64": med["echo_c64"],
        "tutorial_rps_c64": med["tutorial_c64"],
        "batch1_rps_c64": med["batch1_c64"],
        "dynamic_rps_c64": med["dynamic_c64"],
        "spin_rps_c64": med["spin_c64"],
        "threads1_rps_c64": med["threads1_c64"],
        "workers2_rps_c64": med["workers2_c64"],
        "eager_rps_c64": med["eager_c64"],
        "dynamic_rps_c1": med["dynamic_c1"],
        "tutorial_rps_c16": med["tutorial_c16"],
        "p99_ms_c16": p99("dynamic_c16"),
        "p50_ms_c16": statistics.median(r["dynamic_c16"]["p50_ms"] for r in results),
        "p99_ms_c16_spin": p99("spin_c16"),
        "p99_ms_c16_batch1": p99("batch1_c16"),
        "p99_ms_c16_tutorial": p99("tutorial_c16"),
        "mean_batch_c64": statistics.median(r["dynamic_c64"]["mean_batch"] for r in results),
        # The load generator's CPU (cores busy) while measuring each server at c=64.
        "client_cpu_cores": {
            n: statistics.median(r[n]["client_cpu_cores"] for r in results) for n in names
        },
        "resnet18_served_img_s_c32": med["resnet18_c32"],
        "resnet18_spin_served_img_s_c32": med["resnet18_spin_c32"],
        "resnet18_inprocess_img_s_b32": statistics.median(check["inprocess_per_round"]),
        "resnet18_served_over_inprocess": check["served_over_inprocess"],
        "resnet18_check": check,
        # Against the tutorial server (eager PyTorch, batch 1): this engine serving the same
        # eager weights (the engine alone), and serving the ONNX export (engine + ONNX Runtime).
        "engine_alone_over_tutorial_c64": ratio("eager_c64", "tutorial_c64"),
        "dynamic_over_tutorial_c64": ratio("dynamic_c64", "tutorial_c64"),
        # The most any server here could beat the tutorial one by: the HTTP-only echo server.
        "echo_over_tutorial_c64": ratio("echo_c64", "tutorial_c64"),
        "dynamic_over_batch1_c64": ratio("dynamic_c64", "batch1_c64"),
        "dynamic_over_spin_c64": ratio("dynamic_c64", "spin_c64"),
        "dynamic_over_threads1_c64": ratio("dynamic_c64", "threads1_c64"),
        "dynamic_over_workers2_c64": ratio("dynamic_c64", "workers2_c64"),
        "onnx_over_eager_c64": ratio("dynamic_c64", "eager_c64"),
        "wrong_answers": sum(
            m["wrong"] for r in results for n, m in r.items() if isinstance(m, dict)
        ),
        "overload_bad_5xx": over["bad_5xx"],
        "overload_rss_growth_mb": over["rss_growth_mb"],
        # 200s per second under overload over the default engine's rate at c=64 (capacity)
        "overload_goodput_over_capacity": over["codes"].get(200, 0)
        / over["seconds"]
        / med["dynamic_c64"],
        "overload": over,
    }
    out = {key: value for key, value in out.items() if value is not _SKIPPED}
    if "litserve_echo_c64" in names:  # LitServe with a no-op API: the ceiling of the old engine
        out["litserve_echo_rps_c64"] = med["litserve_echo_c64"]
        out["dynamic_over_litserve_echo_c64"] = ratio("dynamic_c64", "litserve_echo_c64")
    return out
