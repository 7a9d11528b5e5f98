"""Where a Lightning training step's time goes beyond the bare loop's, on short steps.

    python benchmarks/step_overhead.py                                 # SimpleCNN, batch 64
    python benchmarks/step_overhead.py --model cifar10_fast --batch-size 1024 --steps 6 --warmup 2 \
        --variants plain lightning --no-profile    # the recipe's net at its batch, bf16
    python benchmarks/step_overhead.py --quick      # smoke run: 2 rounds of 3 steps at batch 16

Variants, built as ``benchmarks/train_throughput.py`` builds its ``plain`` and ``tensor``, timed
in interleaved rounds (the order rotated per round) on the same in-memory tensor pipeline:

    plain         the bare PyTorch loop (Adam, cross-entropy) over the DataModule's loader
    lightning     ClassificationModule + pl.Trainer (no logger, bar or checkpoint: train_throughput's
                  ``tensor``)
    no_log        lightning with ``self.log`` a no-op            -> the cost of logging
    no_metrics    lightning with the task's metric updates a no-op -> the cost of train accuracy
    user          lightning with the defaults a user gets: ``python -m lightning_cls.train``'s
                  callbacks (conf/callbacks/default.yaml and what train.py adds, built by
                  ``train.RunCallbacks``), its logger (CSV) and its trainer settings
                  (conf/trainer/default.yaml: ``log_every_n_steps=10``, the atomic checkpoint
                  plugin), composed from conf/ as ``train`` composes them

Clock: by default this process's CPU time (``--clock cpu``), with one torch thread
(``--threads 1``): every variant runs in this one process and loads its batches there, so its
CPU seconds are the step's cost, nearly blind to other processes on a shared machine (on a
2-vCPU machine at load 8-10 wall-clock overheads spread from -270% to +33% over 5 rounds,
CPU-clock ones over 1 point). Each ratio is computed inside one round (both runs saw the same machine load) and reported as
median [min, max] over the rounds: ``lightning_overhead`` = 1 - lightning/plain (the figure of
issue 55), ``log_share`` = 1 - lightning/no_log, ``metrics_share`` = 1 - lightning/no_metrics,
``user_overhead`` = 1 - user/plain, and ``lightning_overhead_ms`` (the same in ms per step). Then one lightning run (and one plain run) under cProfile
splits the step into parts (``PARTS``: the network's forward, loss, backward, optimizer, the
batch's hand-off and augmentation, logging, metrics, hooks, the progress bar, the loop itself),
as milliseconds per step; cProfile's own cost inflates the Python-heavy parts, so the split says
where the time goes, the paired rounds how much. Data: the synthetic task of CIFAR-10's shape
(timings do not depend on the pixels). The last output line is one JSON object.

``--hooks`` times every ``on_*`` hook of the ``user`` run's callbacks and module with two clock
reads each (``hook_ms_per_step``), without cProfile's inflation.

``--pairing step`` pairs at the step instead of the round: each Lightning fit (``lightning``,
``user``) runs one bare-loop step (its own net, Adam and loader) after each of its own steps, and
each Lightning step's CPU time (everything from the end of the bare step before it to its own
``on_train_batch_end``: fetch, hooks, logging, callbacks) is paired with the bare step next to it,
so both saw the same machine within milliseconds; a round's overhead is 1 - (sum of bare step
times) / (sum of Lightning step times), reported as ``lightning_overhead_stepwise`` and
``user_overhead_stepwise`` (median [min, max] over rounds). Both runs then share the caches: each
step starts after the other's, a colder start than either alone.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import pstats
import sys
import tempfile
import time
from contextlib import nullcontext

import pytorch_lightning as pl
import torch
from paired import cpu_name, summarize  # sibling files in benchmarks/
from train_throughput import MODEL, MODELS, cycle, make_model, timed_loop

from lightning_cls.data.synthetic import SyntheticDataModule
from lightning_cls.module import ClassificationModule
from lightning_cls.training.precision import cpu_has_native_bf16

VARIANTS = ("plain", "lightning", "no_log", "no_metrics", "user", "rotation", "outliers")
# The variants that train with the ood_training method of their name (issue 53), at its defaults.
OOD_TRAININGS = ("rotation", "outliers")
# name -> (numerator, denominator): reported as 1 - num/den, paired per round
RATIOS = {
    "lightning_overhead": ("lightning", "plain"),
    "log_share": ("lightning", "no_log"),
    "metrics_share": ("lightning", "no_metrics"),
    "user_overhead": ("user", "plain"),
    # ood_training's price: the share of lightning's img/s it costs (issue 53)
    "rotation_cost": ("rotation", "lightning"),
    "outliers_cost": ("outliers", "lightning"),
}
# Parts of a step in the cProfile run: (file suffix, function name) whose cumulative time is the
# part's. None calls another, so the parts and the rest add up to the step.
PARTS = {
    "fetch (loader -> Lightning)": [("loops/fetchers.py", "__next__")],
    "hand-off + augment (batch_to_device, on_after_batch_transfer)": [
        ("strategies/strategy.py", "batch_to_device")
    ],
    "forward": [("lightning_cls/module.py", "forward")],
    "loss": [("torch/nn/modules/loss.py", "forward")],
    "log (self.log)": [("core/module.py", "log")],
    "metrics (task.update)": [("lightning_cls/training/tasks/multiclass.py", "update")],
    "backward": [("torch/_tensor.py", "backward")],
    "optimizer (Adam update)": [("torch/optim/adam.py", "adam")],
    "zero_grad": [("torch/optim/optimizer.py", "zero_grad")],
    "progress bar": [("lightning_cls/callbacks/progress_bar.py", "on_train_batch_end")],
    "CSV logger": [("trainer/connectors/logger_connector/logger_connector.py", "log_metrics")],
    "NanGuard": [
        ("lightning_cls/callbacks/nan_guard.py", "on_before_optimizer_step"),
        ("lightning_cls/callbacks/nan_guard.py", "on_before_backward"),
    ],
}
log = logging.getLogger("step_overhead")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=MODELS, default="simplecnn")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=60, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps per run")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--no-profile", action="store_true", help="skip the cProfile split")
    p.add_argument(
        "--hooks",
        action="store_true",
        help="also time every callback's and the module's hooks in one user run (ms per step)",
    )
    p.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="cpu: this process's CPU seconds (what the step costs, nearly blind to other "
        "processes on a shared machine: every variant runs in this one process, 1 thread); "
        "wall: perf_counter",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (1: on a shared machine a descheduled second OpenMP thread "
        "stalls every parallel region; the Python-side costs measured here are single-threaded)",
    )
    p.add_argument(
        "--pairing",
        choices=("round", "step"),
        default="round",
        help="round: each variant's whole run timed, ratios paired per round; step: each "
        "Lightning step paired with a bare step run right after it in the same process",
    )
    p.add_argument("--quick", action="store_true", help="2 rounds of 3 steps at batch 16")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.warmup, args.batch_size = 2, 3, 1, 16
    if args.rounds < 1 or args.steps < 1 or args.batch_size < 1:
        p.error(f"--rounds, --steps and --batch-size must be >= 1, got {args}")
    return args


def recipe(args) -> tuple[str, bool]:
    """(precision, channels_last) of the model's recipe: cifar10_fast trains in bf16 where the
    CPU runs it natively (conf/experiment/cifar10_fast.yaml: precision auto) and channels_last;
    SimpleCNN's tutorial recipe in float32, NCHW."""
    if args.model == "cifar10_fast":
        return ("bf16-mixed" if cpu_has_native_bf16() else "32-true"), True
    return "32-true", False


def datamodule(args, splits=None) -> SyntheticDataModule:
    """The synthetic task's DataModule; ``splits`` (another's) shares its decoded images."""
    size = (args.warmup + args.steps + 1) * args.batch_size  # one epoch holds every step
    dm = SyntheticDataModule(
        10, 3, 32, train_size=size, test_size=64, batch_size=args.batch_size,
        augment="crop_flip", seed=0, channels_last=recipe(args)[1],
    )  # fmt: skip
    if splits is None:
        dm.setup()
    else:
        dm.splits = splits
    return dm


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


class _Clock(pl.Callback):
    """Images per second of the steps after ``warmup``, on ``clock``."""

    def __init__(self, warmup: int, clock):
        self.warmup, self.clock, self.start, self.end, self.seen = warmup, clock, None, None, 0

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.global_step == self.warmup and self.start is None:
            self.start = self.clock()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self.start is not None:
            self.seen += batch[0].shape[0]
            self.end = self.clock()

    def rate(self) -> float:
        return self.seen / (self.end - self.start)


def bare_loop(batches, net, steps: int, warmup: int, clock, opt=None, autocast=nullcontext):
    """train_throughput's ``timed_loop`` (Adam lr 1e-3, cross-entropy) on ``clock``."""
    return timed_loop(batches, net, steps, warmup, opt, autocast, clock=clock)


class _NoLog(ClassificationModule):
    def log(self, *args, **kwargs) -> None:  # the ablation: nothing reaches Lightning's results
        return None


def build_module(variant: str, dm, channels_last: bool) -> ClassificationModule:
    cls = _NoLog if variant == "no_log" else ClassificationModule
    ood_training = variant if variant in OOD_TRAININGS else None
    module = cls(net=make_model(channels_last), spec=dm.spec, ood_training=ood_training)
    if variant == "no_metrics":
        module.task.update = lambda stage, logits, target: None
    return module


def user_defaults(out_dir: str) -> tuple[list[pl.Callback], list, dict]:
    """(callbacks, loggers, trainer settings) of a default ``python -m lightning_cls.train`` run,
    composed from conf/ and built as train.py builds them, writing under ``out_dir``."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from lightning_cls import config_dir
    from lightning_cls.train import RunCallbacks

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"paths.output_dir={out_dir}"])
    callbacks = RunCallbacks.from_config(cfg).callbacks
    loggers = [instantiate(lg) for lg in (cfg.get("logger") or {}).values()]
    trainer = OmegaConf.to_container(cfg.trainer, resolve=True)
    trainer["plugins"] = [instantiate(p) for p in trainer.get("plugins") or []]
    for key in ("_target_", "max_epochs", "accelerator", "devices", "precision"):
        trainer.pop(key, None)  # the benchmark's: one CPU, max_steps, the recipe's precision
    return callbacks, loggers, trainer


def run_lightning(
    variant: str, dm, args, out_dir: str, extra=(), clock=None, instrument=None
) -> float:
    """img/s of a ClassificationModule fit of ``warmup + steps`` steps (timed after warmup);
    ``extra``: more callbacks (the profiler's, the stepwise pairing's), after the run's own;
    ``clock``: a ``_Clock`` of the caller's; ``instrument(obj, label)``: called on the module
    and each of the user run's own callbacks before the fit (``--hooks``)."""
    clock = clock or _Clock(args.warmup, CLOCKS[args.clock])
    callbacks: list[pl.Callback] = [clock]
    settings = dict(
        logger=False, log_every_n_steps=10, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=out_dir,
    )  # fmt: skip
    if variant == "user":
        run_dir = tempfile.mkdtemp(dir=out_dir)  # a fresh run folder: no checkpoint to resume
        user_callbacks, loggers, trainer = user_defaults(run_dir)
        callbacks = user_callbacks + callbacks
        settings = {**trainer, "logger": loggers, "default_root_dir": run_dir}
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=args.warmup + args.steps,
        limit_val_batches=0,
        precision=recipe(args)[0],
        callbacks=[*callbacks, *extra],
        **settings,
    )
    module = build_module(variant, dm, recipe(args)[1])
    if instrument is not None:
        instrument(module, "module")
        for c in callbacks[:-1]:  # the run's own, not the clock
            instrument(c, type(c).__name__)
    trainer.fit(module, datamodule=dm)
    return clock.rate()


def plain_loop(dm, args):
    """(batches, net, autocast) of the bare loop: ``dm``'s loader (never attached to a
    Trainer, it augments each batch itself, as train_throughput's ``plain``), the recipe's
    layout and autocast."""
    precision, channels_last = recipe(args)
    bf16 = precision == "bf16-mixed"
    autocast = (lambda: torch.autocast("cpu", torch.bfloat16)) if bf16 else nullcontext
    return cycle(dm.train_dataloader()), make_model(channels_last), autocast


def run_plain(dm, args) -> float:
    """img/s of the bare loop over the same loader."""
    batches, net, autocast = plain_loop(dm, args)
    return bare_loop(batches, net, args.steps, args.warmup, CLOCKS[args.clock], autocast=autocast)


class _BareBeside(pl.Callback):
    """``--pairing step``: one bare-loop step (``timed_loop``'s body, its own net, Adam and
    loader) after each Lightning step, last of the batch-end callbacks. ``lightning``: the CPU
    seconds from the end of one bare step to the next Lightning step's end (everything
    Lightning, its callbacks and the module do for that step); ``bare``: each bare step's,
    both after ``warmup`` steps."""

    def __init__(self, dm, args, clock):
        self.batches, self.net, self.autocast = plain_loop(dm, args)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-3)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.warmup, self.clock = args.warmup, clock
        self.lightning: list[float] = []
        self.bare: list[float] = []
        self.mark: float | None = None

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        start = self.clock()
        timed = trainer.global_step > self.warmup
        if timed and self.mark is not None:
            self.lightning.append(start - self.mark)
        x, y = next(self.batches)
        self.opt.zero_grad(set_to_none=True)
        with self.autocast():
            loss = self.loss_fn(self.net(x), y)
        loss.backward()
        self.opt.step()
        self.mark = self.clock()
        if timed:
            self.bare.append(self.mark - start)


def run_stepwise(variant: str, dm, plain_dm, args, out_dir: str) -> float:
    """1 - bare/Lightning CPU time over one fit's steps, each paired with the bare step beside
    it (``_BareBeside``)."""
    beside = _BareBeside(plain_dm, args, CLOCKS[args.clock])
    run_lightning(variant, dm, args, out_dir, extra=[beside])
    n = min(len(beside.lightning), len(beside.bare))
    return 1 - sum(beside.bare[:n]) / sum(beside.lightning[:n])


def paired(rounds: list[dict[str, float]]) -> dict[str, dict]:
    """Each ratio of RATIOS as 1 - num/den inside each round, then median, min and max."""
    return {
        name: summarize([1 - r[num] / r[den] for r in rounds])
        for name, (num, den) in RATIOS.items()
        if num in rounds[0] and den in rounds[0]
    }


class _Profiled(pl.Callback):
    """cProfile over the steps after ``warmup`` (steady state: no first-call imports)."""

    def __init__(self, warmup: int, steps: int, clock):
        self.warmup, self.end, self.clock = warmup, warmup + steps, clock
        self.profiler, self.start, self.seconds = cProfile.Profile(clock), None, 0.0

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.global_step == self.warmup and self.start is None:
            self.start = self.clock()
            self.profiler.enable()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.end and self.start is not None:  # the last step's end
            self.profiler.disable()
            self.seconds = self.clock() - self.start


class _HookTimer(pl.Callback):
    """``--hooks``: the CPU time of every ``on_*`` hook of the run's callbacks and module,
    each wrapped in two clock reads (~2 us), over the timed steps (from the first timed
    ``on_train_batch_start`` to the last timed ``on_train_batch_end``): per-step costs without
    cProfile's inflation of Python-heavy code. Lightning's own dispatch is not in them."""

    def __init__(self, warmup: int, steps: int, clock):
        self.warmup, self.end, self.clock = warmup, warmup + steps, clock
        self.seconds: dict[str, float] = {}
        self.on = False

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.on = self.warmup <= trainer.global_step < self.end

    def wrap(self, obj, label: str) -> None:
        for name in dir(type(obj)):
            hook = getattr(obj, name, None) if name.startswith("on_") else None
            if callable(hook) and name not in ("on_train_batch_start", "on_exception"):
                setattr(obj, name, self._timed(hook, f"{label}.{name}"))

    def _timed(self, hook, key: str):
        def timed(*args, **kwargs):
            if not self.on:
                return hook(*args, **kwargs)
            start = self.clock()
            try:
                return hook(*args, **kwargs)
            finally:
                self.seconds[key] = self.seconds.get(key, 0.0) + self.clock() - start

        return timed

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step >= self.end:  # after the last timed step's hooks
            self.on = False


def hook_times(variant: str, dm, args, out_dir: str) -> dict[str, float]:
    """ms per timed step of each hook (``_HookTimer``) that costs 1 us or more, largest first."""
    timer = _HookTimer(args.warmup, args.steps, CLOCKS[args.clock])
    run_lightning(variant, dm, args, out_dir, extra=[timer], instrument=timer.wrap)
    ms = {k: round(1000 * v / args.steps, 4) for k, v in timer.seconds.items()}
    return dict(sorted(((k, v) for k, v in ms.items() if v >= 0.001), key=lambda kv: -kv[1]))


def split(stats: pstats.Stats, seconds: float, steps: int) -> dict[str, float]:
    """Milliseconds per step of each part of PARTS, and ``Lightning loop + hooks`` for the
    rest of the step's wall time (``seconds`` over ``steps``, profiler's cost included)."""

    def cumulative(suffix: str, name: str) -> float:
        return sum(
            value[3]
            for (path, _, func), value in stats.stats.items()
            if func == name and path.endswith(suffix)
        )

    ms = {
        part: 1000 * sum(cumulative(*where) for where in wheres) / steps
        for part, wheres in PARTS.items()
    }
    total = 1000 * seconds / steps  # the parts do not nest: each is a leaf of the step
    ms["Lightning loop + hooks (the rest)"] = total - sum(ms.values())
    ms["step (total)"] = total
    return {k: round(v, 3) for k, v in ms.items()}


def profile(variant: str, dm, args, out_dir: str) -> dict[str, float]:
    """The cProfile split of one ``variant`` fit's steps after warmup."""
    profiled = _Profiled(args.warmup, args.steps, CLOCKS[args.clock])
    run_lightning(variant, dm, args, out_dir, extra=[profiled])
    return split(pstats.Stats(profiled.profiler), profiled.seconds, args.steps)


def profile_plain(dm, args) -> float:
    """ms per step of the bare loop under the same profiler (its own cost included)."""
    batches, net, autocast = plain_loop(dm, args)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    clock = CLOCKS[args.clock]
    bare_loop(batches, net, args.warmup, 0, clock, opt, autocast)
    profiler = cProfile.Profile(clock)
    start = clock()
    profiler.enable()
    bare_loop(batches, net, args.steps, 0, clock, opt, autocast)
    profiler.disable()
    return round(1000 * (clock() - start) / args.steps, 3)


def main(argv=None) -> dict:
    args = parse_args(argv)
    MODEL.clear()
    MODEL.update(MODELS[args.model])
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in ("pytorch_lightning", "lightning_fabric", "lightning_cls"):
        logging.getLogger(name).setLevel(logging.ERROR)
    torch.set_num_threads(args.threads)
    dm = datamodule(args)
    plain_dm = datamodule(args, dm.splits)
    variants = tuple(v for v in VARIANTS if v in args.variants)
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as out_dir:
        for r in range(args.rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            rounds.append({})
            for v in order:
                if args.pairing == "step":
                    if v != "plain":  # the bare loop runs inside each Lightning fit
                        rounds[-1][v] = run_stepwise(v, dm, plain_dm, args, out_dir)
                        log.info(
                            "round %d %-10s %+7.2f%% (stepwise)", r + 1, v, 100 * rounds[-1][v]
                        )
                    continue
                if v == "plain":
                    rounds[-1][v] = run_plain(plain_dm, args)
                else:
                    rounds[-1][v] = run_lightning(v, dm, args, out_dir)
                log.info("round %d %-10s %8.0f img/s", r + 1, v, rounds[-1][v])
        profiles = {}
        if not args.no_profile:
            profiles = {v: profile(v, dm, args, out_dir) for v in ("lightning", "user")}
            profiles["plain"] = {"step (total)": profile_plain(plain_dm, args)}
        hooks = hook_times("user", dm, args, out_dir) if args.hooks else {}
    if args.pairing == "step":
        ratios = {f"{v}_overhead_stepwise": summarize([r[v] for r in rounds]) for v in rounds[0]}
    else:
        ratios = paired(rounds)
    if (
        args.pairing == "round" and "lightning" in variants and "plain" in variants
    ):  # the same, as ms per step
        ms = [1000 * args.batch_size * (1 / r["lightning"] - 1 / r["plain"]) for r in rounds]
        ratios["lightning_overhead_ms"] = summarize(ms)
    for name, st in ratios.items():
        scale, unit = (1, " ms") if name.endswith("_ms") else (100, "%")
        values = (scale * st[k] for k in ("median", "min", "max"))
        log.info("%-22s %+.2f [%+.2f, %+.2f]%s", name, *values, unit)
    for v, parts in profiles.items():
        log.info("cProfile %s (ms/step): %s", v, parts)
    if hooks:
        log.info("hooks of the user run (ms/step): %s", hooks)
    out = {
        "quick": args.quick,
        "model": args.model,
        "batch_size": args.batch_size,
        "steps": args.steps,
        "cpu": cpu_name(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "precision": recipe(args)[0],
        "clock": args.clock,
        "pairing": args.pairing,
        "channels_last": recipe(args)[1],
        "rounds": [
            {v: round(x, 1 if args.pairing == "round" else 4) for v, x in r.items()} for r in rounds
        ],
        **ratios,
        "profile_ms_per_step": profiles,
        "hook_ms_per_step": hooks,
    }
    print(json.dumps(out), flush=True)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
