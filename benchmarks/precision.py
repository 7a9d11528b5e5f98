"""What bf16 autocast costs or gives on this CPU: one training step of ``experiment=cifar10_fast``'s
network (airbench94's widths 64/256/256, channels_last, SGD-Nesterov) in fp32 and under
``torch.autocast("cpu", torch.bfloat16)`` (what Lightning's ``bf16-mixed`` does), timed in
interleaved rounds (fp32, bf16, fp32, bf16, ...) and reported as the per-round ratio
bf16 / fp32 images per second (median and range), beside the CPU's name, torch's capability
string, whether bf16 is native (AVX512-BF16 or AMX) and what ``trainer.precision=auto``
resolves to here.

    python benchmarks/precision.py                 # batch 256, 3 rounds of 3 timed steps
    python benchmarks/precision.py --quick         # a tiny net, the suite's smoke run

The last output line is the JSON of the run.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from paired import cpu_name, summarize
from torch import nn

from lightning_cls.models import create_model
from lightning_cls.training.precision import choose_auto, cpu_description, cpu_has_native_bf16


def make_net(widths: list[int]) -> nn.Module:
    net = create_model(
        "airbench", num_classes=10, widths=widths, whiten=False, dirac=True, bn_weight=False
    )
    return net.to(memory_format=torch.channels_last)


def images_per_second(net: nn.Module, batch: int, steps: int, bf16: bool) -> float:
    """Images per second over ``steps`` training steps (after one untimed warm-up step)."""
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.85, nesterov=True)
    x = torch.randn(batch, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()

    step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return batch * steps / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny net, 2 rounds of 1 step")
    args = parser.parse_args(argv)
    widths = [64, 256, 256]
    if args.quick:
        args.batch, args.steps, args.rounds, widths = 8, 1, 2, [8, 16, 16]
    torch.manual_seed(0)
    net = make_net(widths)
    rounds = []
    for _ in range(args.rounds):
        fp32 = images_per_second(net, args.batch, args.steps, bf16=False)
        bf16 = images_per_second(net, args.batch, args.steps, bf16=True)
        rounds.append({"fp32": fp32, "bf16": bf16})
        print(f"round {len(rounds)}: fp32 {fp32:.1f} img/s, bf16 autocast {bf16:.1f} img/s")
    ratio = summarize([r["bf16"] / r["fp32"] for r in rounds])
    out = {
        "quick": args.quick,
        "cpu": cpu_name(),
        "capability": cpu_description(),
        "native_bf16": cpu_has_native_bf16(),
        "auto_resolves_to": choose_auto("cpu")[0],
        "threads": torch.get_num_threads(),
        "batch": args.batch,
        "widths": widths,
        "rounds": rounds,
        "bf16_over_fp32": ratio,
    }
    print(
        f"bf16 / fp32: median {ratio['median']:.3f}x [{ratio['min']:.3f}, {ratio['max']:.3f}] "
        f"on {out['cpu']} ({out['capability']}); precision=auto -> {out['auto_resolves_to']}"
    )
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
