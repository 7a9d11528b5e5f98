"""Where a SimpleCNN training step's time goes on this CPU, and what the compute alone allows.

    python benchmarks/train_profile.py --rounds 3 --steps 40
    python benchmarks/train_profile.py --quick      # 1 round of 2 steps at batch 8, a smoke run

The compute-only bound of ``benchmarks/train_throughput.py``'s ``ceiling`` variant, split
further: the same bare loop (Adam, cross-entropy, zero_grad/backward/step) on a few pre-made
batches, timed in interleaved rounds for each memory layout (NCHW, channels_last) and batch size
(the tutorial's 64 and a larger one), then ``torch.profiler``'s self CPU time per operator
group for each layout at the first batch size. The pixels are seeded random values: a
convolution's time does not depend on them. bf16 autocast is added as a layout only where the
CPU runs bf16 natively (AVX-512-BF16 or AMX); elsewhere it is emulated and slower than fp32.

The last output line is one JSON object.
"""

from __future__ import annotations

import argparse
import collections
import json
from contextlib import nullcontext

import torch
from paired import cpu_name, paired_ratio
from train_throughput import cycle, timed_loop

from lightning_cls.models import create_model
from lightning_cls.training.precision import cpu_has_native_bf16

# Operator groups by the profiler's aten op names (self CPU time); anything else, the
# autograd engine's and the Optimizer wrappers' own time included, is "other".
GROUPS = {
    "conv backward": {"convolution_backward", "mkldnn_convolution_backward"},
    "conv forward": {"mkldnn_convolution", "convolution", "_convolution", "conv2d"},
    "max-pool": {"max_pool2d", "max_pool2d_with_indices", "max_pool2d_with_indices_backward"},
    "linear": {"linear", "addmm", "mm", "t", "sum"},  # sum: the bias gradient
    "relu": {"relu_", "relu", "clamp_min_", "threshold_backward"},  # relu_ runs clamp_min_
    "loss": {
        "cross_entropy_loss",
        "log_softmax",
        "_log_softmax",
        "_log_softmax_backward_data",
        "nll_loss",
        "nll_loss_nd",
        "nll_loss_forward",
        "nll_loss_backward",
    },  # fmt: skip
    "optimizer": {
        "_fused_adam_",
        "_foreach_add_",
        "add_",
        "mul_",
        "lerp_",
        "addcmul_",
        "addcdiv_",
        "sqrt",
        "div",
        "div_",
        "_foreach_sqrt",
        "_foreach_div_",
    },  # fmt: skip
    "layout copies (flatten of channels_last)": {"clone", "contiguous", "copy_", "_to_copy"},
    "zero_grad/allocation": {"zero_", "fill_", "empty", "empty_like", "empty_strided", "resize_"},
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=40, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256])
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    p.add_argument("--quick", action="store_true", help="1 round, 2 steps, batch 8")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.warmup, args.batch_sizes = 1, 2, 1, [8]
    if args.rounds < 1 or args.steps < 1 or min(args.batch_sizes) < 1:
        p.error(
            f"--rounds, --steps and every --batch-sizes value must be >= 1, got "
            f"{args.rounds}, {args.steps} and {args.batch_sizes}"
        )
    return args


def layouts() -> dict[str, tuple[torch.memory_format, bool, bool]]:
    """name -> (memory format, bf16 autocast, fused Adam). ``nchw`` is the tutorial's loop
    (torch's default Adam: one kernel per parameter and operation on a CPU)."""
    out = {
        "nchw": (torch.contiguous_format, False, False),
        "channels_last": (torch.channels_last, False, False),
        "channels_last_fused": (torch.channels_last, False, True),
    }
    if cpu_has_native_bf16():
        out["channels_last_fused_bf16"] = (torch.channels_last, True, True)
    return out


def setup(layout: str, batch_size: int):
    fmt, bf16, fused = layouts()[layout]
    torch.manual_seed(0)
    net = create_model("simplecnn", num_classes=10, in_channels=3, image_size=32)
    net = net.to(memory_format=fmt)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, fused=fused or None)
    batches = [
        (
            torch.randn(batch_size, 3, 32, 32).contiguous(memory_format=fmt),
            torch.randint(0, 10, (batch_size,)),
        )
        for _ in range(4)
    ]
    autocast = (lambda: torch.autocast("cpu", torch.bfloat16)) if bf16 else nullcontext
    return net, opt, batches, autocast


def timed(layout: str, batch_size: int, steps: int, warmup: int) -> float:
    """Images per second over ``steps`` steps after ``warmup`` untimed ones."""
    net, opt, batches, autocast = setup(layout, batch_size)
    return timed_loop(cycle(batches), net, steps, warmup, opt, autocast)


def group_of(op: str) -> str:
    name = op.removeprefix("aten::")
    return next((group for group, ops in GROUPS.items() if name in ops), "other")


def profile(layout: str, batch_size: int, steps: int, warmup: int) -> dict[str, float]:
    """Self CPU milliseconds per step, summed per operator group (and per op, top ones)."""
    net, opt, batches, autocast = setup(layout, batch_size)
    if warmup:
        timed_loop(cycle(batches), net, warmup, 0, opt, autocast)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        rate = timed_loop(cycle(batches), net, steps, 0, opt, autocast)
    groups: collections.Counter = collections.Counter()
    ops: collections.Counter = collections.Counter()
    for event in prof.key_averages():
        ms = event.self_cpu_time_total / 1000 / steps
        groups[group_of(event.key)] += ms
        ops[event.key] += ms
    return {
        "wall_ms_per_step": 1000 * batch_size / rate,
        "groups_ms": dict(groups.most_common()),
        "top_ops_ms": dict(ops.most_common(12)),
    }


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    names = [f"{lay}@{bs}" for bs in args.batch_sizes for lay in layouts()]
    rounds = []
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]  # rotate who runs first
        result = {}
        for name in order:
            lay, bs = name.split("@")
            result[name] = timed(lay, int(bs), args.steps, args.warmup)
            print(f"round {r + 1} {name:28s} {result[name]:8.0f} img/s", flush=True)
        rounds.append(result)
    base = f"nchw@{args.batch_sizes[0]}"
    ratios = {name: paired_ratio(rounds, name, base) for name in names if name != base}
    bs0 = args.batch_sizes[0]
    profiles = {lay: profile(lay, bs0, args.steps, args.warmup) for lay in layouts()}

    print(f"\nimg/s per round ({args.rounds} rounds x {args.steps} steps), and / {base} paired:")
    for name in names:
        per = ", ".join(f"{r[name]:,.0f}" for r in rounds)
        ratio = ratios.get(name)
        rtxt = f"{ratio['median']:.2f} [{ratio['min']:.2f}, {ratio['max']:.2f}]" if ratio else "1"
        print(f"| {name} | {per} | {rtxt} |")
    for lay, prof in profiles.items():
        total = sum(prof["groups_ms"].values())
        print(f"\n{lay} @ {bs0}: {prof['wall_ms_per_step']:.2f} ms/step wall, self CPU per group:")
        for group, ms in prof["groups_ms"].items():
            print(f"| {group} | {ms:.2f} ms | {100 * ms / total:.0f}% |")
    out = {
        "quick": args.quick,
        "cpu": cpu_name(),
        "torch": torch.__version__,
        "threads": args.threads,
        "bf16_native": cpu_has_native_bf16(),
        "rounds": rounds,
        "ratios_vs": base,
        "ratios": ratios,
        "profiles": profiles,
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
