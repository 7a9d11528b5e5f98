"""Training throughput on CIFAR-10 images, SimpleCNN, batch 64, in interleaved rounds:

    (A) classic   the tutorial's plain loop: per-sample PIL transforms, DataLoader(num_workers=2)
    (B) pil       lightning_cls, pipeline=pil (the same per-sample transforms, num_workers=2)
    (C) tensor    lightning_cls, pipeline=tensor (uint8 in memory, batched crop/flip/normalize)
    (D) ceiling   the same model trained on pre-made float batches in a bare loop (compute only)
    (E) fast      lightning_cls, tensor pipeline + channels_last + bf16-mixed (if the CPU has bf16)
    (+) plain     C's tensor loader in the bare loop of D: separates pipeline cost from Lightning's
    (+) pil_cap   B with the opt-in thread cap (data.cap_threads=true: cores - workers threads)
    (+) fast_compiled  E with callbacks=[default,compile] (torch.compile, inductor); opt-in: only when
                  named in --variants (each round compiles anew, inside the warmup steps)

    python benchmarks/train_throughput.py            # full run; updates docs/benchmarks.md
    python benchmarks/train_throughput.py --quick    # smoke run: synthetic data, few steps
    python benchmarks/train_throughput.py --model cifar10_fast --batch-size 256 \
        --variants tensor plain     # the recipe's net: Lightning overhead (prints, no docs)

Data: ../shared/data/cifar10-train-jpg.tar.gz, unpacked once and decoded through the
ImageFolder cache; without it a synthetic task of the same shape is used and the output says
so. Each round runs every variant once (order rotated per round); each run trains ``--steps``
timed steps after ``--warmup`` untimed ones. Every ratio is computed per round from that round's
own runs (a paired comparison: both sides saw the same machine load) and reported as median,
min and max over the rounds: C/D ``tensor_over_ceiling``, E/A ``fast_over_classic``,
``lightning_overhead`` (1 - C/plain), ``pipeline_overhead`` (1 - plain/D),
``thread_cap_gain`` (pil_cap/B - 1) and ``compile_gain`` (fast_compiled/E - 1). The last output
line is one JSON object with the per-round img/s (``rounds``), the ratios, and whether E really
trained in bf16 (``bf16_used``).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tarfile
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import pytorch_lightning as pl
import torch
from paired import cpu_name, summarize, write_section  # sibling file in benchmarks/
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T

from lightning_cls.callbacks import CompileModel
from lightning_cls.data.base import ImageDataModule
from lightning_cls.data.imagefolder import ImageFolderDataModule
from lightning_cls.data.memory import ArrayDataset
from lightning_cls.data.synthetic import SyntheticDataModule
from lightning_cls.models import create_model
from lightning_cls.module import ClassificationModule
from lightning_cls.training.precision import cpu_has_native_bf16

REPO = Path(__file__).resolve().parents[1]
DOC_START, DOC_END = "<!-- train_throughput:start -->", "<!-- train_throughput:end -->"
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
VARIANTS = ("classic", "pil", "tensor", "ceiling", "fast", "plain", "pil_cap")  # the default
OPT_IN_VARIANTS = ("fast_compiled",)
# name -> (numerator, denominator, as overhead: 1 - num/den, or gain: num/den - 1, or ratio)
RATIOS = {
    "tensor_over_ceiling": ("tensor", "ceiling", "ratio"),
    "fast_over_classic": ("fast", "classic", "ratio"),
    "lightning_overhead": ("tensor", "plain", "overhead"),
    "pipeline_overhead": ("plain", "ceiling", "overhead"),
    "thread_cap_gain": ("pil_cap", "pil", "gain"),
    "compile_gain": ("fast_compiled", "fast", "gain"),
}
log = logging.getLogger("train_throughput")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--data", type=Path, default=REPO.parent / "shared/data/cifar10-train-jpg.tar.gz"
    )
    p.add_argument(
        "--unpack-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "lightning_cls_bench" / "cifar10",
    )
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=100, help="timed training steps per run")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps per run")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument(
        "--model",
        choices=MODELS,
        default="simplecnn",
        help="network (docs/benchmarks.md is rewritten only for simplecnn with every variant)",
    )
    p.add_argument("--docs", type=Path, default=REPO / "docs/benchmarks.md")
    p.add_argument("--quick", action="store_true", help="synthetic data, 2 rounds of 4 steps of 16")
    p.add_argument(
        "--variants",
        nargs="+",
        choices=VARIANTS + OPT_IN_VARIANTS,
        default=list(VARIANTS),
        help="run only these (ratios whose two variants ran are reported); fast_compiled is opt-in",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.warmup, args.data = 2, 3, 1, Path("/nonexistent")
        args.batch_size = 16  # a smoke run: every variant's code path, not its speed
    if args.rounds < 1 or args.steps < 1:
        p.error(f"--rounds and --steps must be >= 1, got {args.rounds} and {args.steps}")
    return args


def load_datamodule(args, **kw) -> tuple[ImageDataModule, str]:
    common = dict(batch_size=args.batch_size, augment="crop_flip", seed=0, **kw)
    if args.data.is_file():
        if not (args.unpack_dir / "train").is_dir():
            args.unpack_dir.mkdir(parents=True, exist_ok=True)
            with tarfile.open(args.data) as tar:
                tar.extractall(args.unpack_dir, filter="data")
        dm = ImageFolderDataModule(
            str(args.unpack_dir), mean=MEAN, std=STD, val_size=5000, test_size=0.0001, **common
        )
        return dm, f"CIFAR-10 JPEGs ({args.data.name})"  # the archive, not this machine's path
    size = 128 if args.quick else 50_000
    dm = SyntheticDataModule(10, 3, 32, train_size=size, test_size=64, **common)
    return dm, f"SYNTHETIC 32x32x3 data ({args.data} not found)"


# --model: the network every variant trains. cifar10_fast is that recipe's airbench net
# (conf/experiment/cifar10_fast.yaml), for its Lightning-vs-bare-loop overhead.
MODELS = {
    "simplecnn": {"name": "simplecnn"},
    "cifar10_fast": {
        "name": "airbench",
        "widths": [64, 256, 256],
        "whiten": True,
        "dirac": True,
        "bn_weight": False,
    },
}
MODEL = dict(MODELS["simplecnn"])
MODEL_LABELS = {"simplecnn": "SimpleCNN", "cifar10_fast": "the cifar10_fast recipe's airbench net"}


def make_model(channels_last: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    kwargs = dict(MODEL)
    net = create_model(kwargs.pop("name"), num_classes=10, in_channels=3, image_size=32, **kwargs)
    return net.to(memory_format=torch.channels_last) if channels_last else net


def timed_loop(
    batches, net, steps: int, warmup: int, opt=None, autocast=nullcontext, clock=time.perf_counter
) -> float:
    """Plain PyTorch training loop; img/s over ``steps`` steps after ``warmup`` steps.
    ``opt``: torch's default Adam (lr 1e-3) unless given; ``autocast``: a context factory;
    ``clock``: what times it (``time.process_time`` for CPU seconds on a busy machine)."""
    opt = opt or torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    seen, start = 0, clock()
    for i, (x, y) in enumerate(batches):
        if i == warmup:
            start = clock()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        seen += x.shape[0] if i >= warmup else 0
        if i + 1 == warmup + steps:
            break
    return seen / (clock() - start)


def cycle(loader):
    while True:
        yield from loader


def run_classic(dm: ImageDataModule, args) -> float:
    """(A) As the tutorial writes it: PIL per sample, DataLoader with 2 workers."""
    tf = T.Compose(
        [
            T.RandomCrop(32, padding=4),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
            T.Normalize(dm.mean, dm.std),
        ]
    )
    data: Dataset = ArrayDataset(dm.splits["train"], tf)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=2)
    return timed_loop(cycle(loader), make_model(), args.steps, args.warmup)


def run_ceiling(dm: ImageDataModule, args) -> float:
    """(D) Compute only: the same loop over a few pre-made, pre-augmented float batches."""
    augment = dm.batch_augment()
    split = dm.splits["train"]
    batches = [
        (
            augment(split.images[i : i + args.batch_size], train=True),
            split.labels[i : i + args.batch_size],
        )
        for i in range(0, 8 * args.batch_size, args.batch_size)
    ]
    return timed_loop(cycle(batches), make_model(), args.steps, args.warmup)


def run_plain(dm: ImageDataModule, args) -> float:
    """(+) The tensor pipeline's loader in the bare loop (never attached to a Trainer, it
    augments each batch itself)."""
    return timed_loop(cycle(dm.train_dataloader()), make_model(), args.steps, args.warmup)


class _Clock(pl.Callback):
    def __init__(self, warmup: int):
        self.warmup, self.start, self.seen = warmup, None, 0

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.global_step == self.warmup:
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self.start is not None:
            self.seen += batch[0].shape[0]
            self.end = time.perf_counter()


def run_lightning(
    dm: ImageDataModule, args, fast: bool = False, seen_dtypes=None, compiled: bool = False
) -> float:
    """(B, C, E) lightning_cls: ClassificationModule + Trainer on the given DataModule;
    ``compiled`` adds the CompileModel callback (fast_compiled).

    ``seen_dtypes`` (a set) collects the dtype of every logits tensor the network produced,
    so the caller can tell whether bf16-mixed really ran in bf16.
    """
    bf16 = fast and cpu_has_native_bf16()
    module = ClassificationModule(net=make_model(channels_last=fast), spec=dm.spec)
    if seen_dtypes is not None:
        module.net.register_forward_hook(lambda mod, inp, out: seen_dtypes.add(str(out.dtype)))
    clock = _Clock(args.warmup)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=args.warmup + args.steps,
        limit_val_batches=0,
        precision="bf16-mixed" if bf16 else "32-true",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[clock, CompileModel()] if compiled else [clock],
    )
    trainer.fit(module, datamodule=dm)
    return clock.seen / (clock.end - clock.start)


def run_capped(dm: ImageDataModule, args) -> float:
    """(B with the cap) lightning_cls with pipeline=pil and ``data.cap_threads=true``."""
    dm.cap_threads = True
    try:
        return run_lightning(dm, args)
    finally:
        dm.cap_threads = False


def paired(rounds: list[dict[str, float]]) -> dict[str, dict]:
    """Each ratio of RATIOS computed per round, then its median, min and max over rounds."""
    out = {}
    for name, (num, den, kind) in RATIOS.items():
        if num not in rounds[0] or den not in rounds[0]:
            continue
        values = [r[num] / r[den] for r in rounds]
        sign = {"overhead": (1, -1), "gain": (-1, 1), "ratio": (0, 1)}[kind]
        out[name] = summarize([sign[0] + sign[1] * v for v in values])
    return out


def markdown(results: dict, source: str, args) -> str:
    command = " ".join(["python benchmarks/train_throughput.py", *sys.argv[1:]])
    rows = "\n".join(
        f"| {v} | {statistics.median(r[v] for r in results['rounds']):,.0f} | "
        f"{', '.join(f'{r[v]:,.0f}' for r in results['rounds'])} |"
        for v in results["variants"]
    )
    ratios = "\n".join(
        f"| {name} | {_formula(num, den, kind)} | {_fmt(results[name], kind)} | "
        f"{', '.join(_fmt1(x, kind) for x in results[name]['per_round'])} |"
        for name, (num, den, kind) in RATIOS.items()
        if name in results
    )
    return f"""{DOC_START}

`{command}` — {MODEL_LABELS[args.model]}, batch {args.batch_size}, {source};
{args.rounds} interleaved rounds x {args.steps} timed steps; {cpu_name()},
{torch.get_num_threads()} torch intra-op threads per variant at start, torch {torch.__version__};
E trained in bf16: {results["bf16_used"]}.

| variant | median img/s | per round |
|---|---|---|
{rows}

Ratios, each computed within one round (paired), median [min, max] over rounds:

| ratio | of | median [min, max] | per round |
|---|---|---|---|
{ratios}
{DOC_END}"""


def _formula(num: str, den: str, kind: str) -> str:
    return {"overhead": f"1 - {num}/{den}", "gain": f"{num}/{den} - 1"}.get(kind, f"{num}/{den}")


def _fmt1(x: float, kind: str) -> str:
    return f"{x:+.1%}" if kind != "ratio" else f"{x:.2f}"


def _fmt(stats: dict, kind: str) -> str:
    lo, hi = _fmt1(stats["min"], kind), _fmt1(stats["max"], kind)
    return f"{_fmt1(stats['median'], kind)} [{lo}, {hi}]"


def main(argv=None) -> dict:
    args = parse_args(argv)
    MODEL.clear()
    MODEL.update(MODELS[args.model])
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in ("pytorch_lightning", "lightning_fabric", "lightning_cls"):
        logging.getLogger(name).setLevel(logging.WARNING)
    pil_dm, source = load_datamodule(args, pipeline="pil", num_workers=2)
    pil_dm.setup()
    tensor_dm, _ = load_datamodule(args)
    fast_dm, _ = load_datamodule(args, channels_last=True)
    plain_dm, _ = load_datamodule(args)
    for dm in (tensor_dm, fast_dm, plain_dm):  # share the decoded splits; no second decode
        dm.splits = pil_dm.splits
    log.info("Data: %s", source)
    fast_dtypes: set[str] = set()
    runners = {
        "classic": lambda: run_classic(pil_dm, args),
        "pil": lambda: run_lightning(pil_dm, args),
        "tensor": lambda: run_lightning(tensor_dm, args),
        "ceiling": lambda: run_ceiling(tensor_dm, args),
        "fast": lambda: run_lightning(fast_dm, args, fast=True, seen_dtypes=fast_dtypes),
        "plain": lambda: run_plain(plain_dm, args),
        "pil_cap": lambda: run_capped(pil_dm, args),
        "fast_compiled": lambda: run_lightning(fast_dm, args, fast=True, compiled=True),
    }
    rounds: list[dict[str, float]] = []
    default_threads = torch.get_num_threads()
    variants = tuple(v for v in VARIANTS + OPT_IN_VARIANTS if v in args.variants)
    for r in range(args.rounds):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        rounds.append({})
        for v in order:
            # The thread cap (pil_cap) lowers torch's threads for its 2 workers; every variant
            # starts from the process default, as a fresh script would.
            torch.set_num_threads(default_threads)
            rounds[-1][v] = runners[v]()
            log.info("round %d %-9s %8.0f img/s", r + 1, v, rounds[-1][v])
    torch.set_num_threads(default_threads)
    results = {
        "rounds": [{v: round(r[v], 1) for v in variants} for r in rounds],
        "variants": list(variants),
        **paired(rounds),
        "bf16_supported": cpu_has_native_bf16(),
        "bf16_used": "torch.bfloat16" in fast_dtypes,
        "fast_logits_dtypes": sorted(fast_dtypes),
        "data": source,
        "cpu": cpu_name(),
        "torch_threads": default_threads,
        "quick": args.quick,
        "steps": args.steps,
        "model": args.model,
        "batch_size": args.batch_size,
    }
    section = markdown(results, source, args)
    log.info("\n%s", section)
    if not args.quick and set(variants) == set(VARIANTS) and args.model == "simplecnn":
        write_section(args.docs, DOC_START, DOC_END, section)
    print(json.dumps(results), flush=True)
    return results


if __name__ == "__main__":
    main()
