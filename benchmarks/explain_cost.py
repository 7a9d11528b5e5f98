"""What one heat map costs on this CPU: Grad-CAM and CAM per image for ``simplecnn`` and
``resnet18`` at 32x32 (random weights: the cost does not depend on them), against the plain
prediction of the same image. Each figure is the median over ``--repeats`` calls of
``Explainer.explain`` on one image (as the server's ``/explain`` does), and on a batch of
``--batch`` images divided by its size, after one untimed warm-up call; the prediction,
Grad-CAM and CAM are timed in turn within each repeat.

    python benchmarks/explain_cost.py                # 32x32, 30 repeats, batch 32
    python benchmarks/explain_cost.py --quick        # 16x16, narrow nets: the suite's smoke run

The last output line is the JSON of the run (CPU name, load average before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
from paired import cpu_name

from lightning_cls.explain import Explainer
from lightning_cls.inference.spec import InputSpec
from lightning_cls.models import create_model

MODELS = {"simplecnn": {}, "resnet18": {}}
QUICK_MODELS = {"simplecnn": {"widths": [4, 8], "hidden": 16}, "resnet18": {}}


def interleaved_ms(calls: dict, repeats: int, per: int = 1) -> dict[str, float]:
    """Median wall time in milliseconds (divided by ``per``) of each of ``calls``, timed in
    turn within each repeat (a shared machine's load then weighs on all alike), after one
    untimed warm-up call each."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call()
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append((time.perf_counter() - start) * 1000 / per)
    return {name: statistics.median(t) for name, t in times.items()}


def measure(name: str, options: dict, size: int, repeats: int, batch: int) -> dict:
    torch.manual_seed(0)
    net = create_model(name, num_classes=10, image_size=size, **options).eval()
    spec = InputSpec(
        classes=tuple(map(str, range(10))),
        mean=(0.5,) * 3,
        std=(0.25,) * 3,
        image_size=size,
        num_channels=3,
    )
    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8)

    def predict(x):
        with torch.inference_mode():
            return net(spec.preprocess(x))

    row: dict = {"model": name}
    explainers = {}
    for method in ("gradcam", "cam"):
        try:
            explainers[method] = Explainer(net, spec, method)
            row[method] = {"layer": explainers[method].layer}
        except ValueError as err:  # simplecnn's flatten + MLP head: no CAM
            row[method] = {"supported": False, "reason": str(err).split(";")[0]}
    for key, x, rounds, per in (
        ("one_image_ms", images[:1], repeats, 1),
        (f"batch{batch}_per_image_ms", images, max(1, repeats // 5), batch),
    ):
        calls = {"predict": lambda x=x: predict(x)}
        calls.update({m: (lambda x=x, e=e: e.explain(x)) for m, e in explainers.items()})
        for what, ms in interleaved_ms(calls, rounds, per).items():
            row.setdefault(what, {})[key] = ms
    return row


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--quick", action="store_true", help="16x16, narrow nets, 1 repeat")
    args = parser.parse_args(argv)
    models = MODELS
    if args.quick:
        args.size, args.repeats, args.batch, models = 16, 1, 2, QUICK_MODELS
    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    rows = [
        measure(name, opts, args.size, args.repeats, args.batch) for name, opts in models.items()
    ]
    for row in rows:
        parts = [f"predict {row['predict']['one_image_ms']:.2f} ms"]
        for method in ("gradcam", "cam"):
            m = row[method]
            parts.append(
                f"{method} {m['one_image_ms']:.2f} ms/image (batched "
                f"{m[f'batch{args.batch}_per_image_ms']:.2f})"
                if m.get("supported", True)
                else f"{method} not supported"
            )
        print(f"{row['model']} at {args.size}x{args.size}: " + ", ".join(parts))
    out = {
        "quick": args.quick,
        "cpu": cpu_name(),
        "threads": torch.get_num_threads(),
        "size": args.size,
        "repeats": args.repeats,
        "batch": args.batch,
        "load_before": [round(v, 2) for v in load_before],
        "load_after": [round(v, 2) for v in os.getloadavg()],
        "rows": rows,
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
