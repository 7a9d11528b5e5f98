"""NanGuard's per-step cost: the per-parameter scan it used to do (one host sync per
parameter) against the one-flag check it does now (one sync per optimizer step).

Times ``on_before_optimizer_step``-equivalent checks over a real network's gradients, the two
variants interleaved per round (A, B, A, B...) so both see the same machine load; reports the
median per-check time and the paired ratio. On a GPU the difference is the syncs themselves
(each ``bool(cuda_tensor)`` waits for the stream); on a CPU it is the per-tensor Python and
dispatch overhead.

    python benchmarks/nan_guard_sync.py [--model resnet18] [--rounds 7] [--device cpu] [--quick]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from paired import cpu_name, paired_ratio, summarize  # sibling file in benchmarks/

from lightning_cls.callbacks.nan_guard import finite_flag
from lightning_cls.models import create_model


def per_parameter(grads: list[torch.Tensor]) -> bool:
    """The former check: ``isfinite(g).all()`` read back for every gradient."""
    return all(bool(torch.isfinite(g).all()) for g in grads)


def one_flag(grads: list[torch.Tensor]) -> bool:
    return finite_flag([], grads)


def _time(fn, grads, reps: int, device: torch.device) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        fn(grads)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 5 reps (smoke test)")
    args = parser.parse_args()
    rounds, reps = (2, 5) if args.quick else (args.rounds, args.reps)
    device = torch.device(args.device)
    net = create_model(args.model, num_classes=10, in_channels=3, image_size=32).to(device)
    net(torch.randn(8, 3, 32, 32, device=device)).sum().backward()
    grads = [p.grad for p in net.parameters() if p.grad is not None]
    if not (per_parameter(grads) and one_flag(grads)):
        raise RuntimeError("the gradients of a plain backward pass should be finite")
    results = []
    for _ in range(rounds):
        results.append(
            {
                "per_parameter": _time(per_parameter, grads, reps, device),
                "one_flag": _time(one_flag, grads, reps, device),
            }
        )
    print(
        json.dumps(
            {
                "benchmark": "nan_guard_sync",
                "model": args.model,
                "device": str(device),
                "cpu": cpu_name(),
                "gradients": len(grads),
                "threads": torch.get_num_threads(),
                "syncs_per_step": {"per_parameter": len(grads), "one_flag": 1},
                "per_parameter_us": summarize([r["per_parameter"] * 1e6 for r in results]),
                "one_flag_us": summarize([r["one_flag"] * 1e6 for r in results]),
                "speedup": paired_ratio(results, "per_parameter", "one_flag"),
            }
        )
    )


if __name__ == "__main__":
    main()
