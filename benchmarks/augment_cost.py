"""What the stronger augmentations cost in the batched uint8 pipeline.

Times ``BatchAugment`` (crop + flip + normalize, CIFAR-10 shaped uint8 batches) with and without
``auto_augment`` = randaugment / trivialaugment / autoaugment_cifar10 and ``random_erasing``,
and torchvision v2's ``RandAugment`` applied sample by sample (the PIL-pipeline way, minus the
PIL decode) for scale. Variants run interleaved, round by round, so each round's ratio to the
crop+flip baseline is measured under the same load; the JSON's ratios are medians over rounds.

    python benchmarks/augment_cost.py                 # 5 rounds of 20 batches of 256
    python benchmarks/augment_cost.py --quick         # smoke run: 2 rounds of 2 small batches

The last output line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch
from paired import cpu_name, paired_ratio, summarize
from torchvision.transforms import v2

from lightning_cls.data.augment import BatchAugment

MEAN, STD = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)
VARIANTS = {
    "crop_flip": {},
    "randaugment": {"auto_augment": "randaugment"},
    "trivialaugment": {"auto_augment": "trivialaugment"},
    "autoaugment_cifar10": {"auto_augment": "autoaugment_cifar10"},
    "random_erasing": {"random_erasing": 0.25},
}


def batched(kwargs: dict):
    augment = BatchAugment(MEAN, STD, crop_padding=4, hflip=True, **kwargs)
    return lambda x, g: augment(x, train=True, generator=g)


def per_sample_randaugment():
    """torchvision v2 RandAugment one image at a time, then the same crop/flip/normalize."""
    ra, finish = v2.RandAugment(), BatchAugment(MEAN, STD, crop_padding=4, hflip=True)
    return lambda x, g: finish(torch.stack([ra(img) for img in x]), train=True, generator=g)


def time_variant(fn, batches: list[torch.Tensor]) -> float:
    """Images per second over ``batches`` (each with its own seeded generator)."""
    started = time.perf_counter()
    for i, x in enumerate(batches):
        fn(x, torch.Generator().manual_seed(i))
    return sum(len(x) for x in batches) / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--quick", action="store_true", help="2 rounds of 2 batches of 32 (smoke)")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.batches, args.batch_size = 2, 2, 32
    if args.threads:
        torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    batches = [
        torch.randint(0, 256, (args.batch_size, 3, 32, 32), dtype=torch.uint8, generator=g)
        for _ in range(args.batches)
    ]
    fns = {name: batched(kwargs) for name, kwargs in VARIANTS.items()}
    fns["torchvision_v2_randaugment_per_sample"] = per_sample_randaugment()
    for fn in fns.values():  # warm-up: first-call allocations, thread pools
        fn(batches[0][:8], torch.Generator().manual_seed(0))
    rounds = []
    for r in range(args.rounds):
        names = list(fns) if r % 2 == 0 else list(reversed(fns))  # alternate the order
        rounds.append({name: time_variant(fns[name], batches) for name in names})
    result = {
        "task": "augment_cost",
        "machine": f"{cpu_name()} ({platform.machine()})",
        "torch_threads": torch.get_num_threads(),
        "batch": [args.batch_size, 3, 32, 32],
        "batches_per_round": args.batches,
        "rounds": args.rounds,
        "img_s": {name: summarize([rd[name] for rd in rounds]) for name in fns},
        # < 1: the fraction of the crop+flip throughput left with the option on.
        "ratio_to_crop_flip": {
            name: paired_ratio(rounds, name, "crop_flip") for name in fns if name != "crop_flip"
        },
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
