"""``trainer.precision=auto``: bf16 autocast only where the hardware runs bf16 natively.

A recipe that wants bf16 (``experiment=cifar10_fast``) asks for ``auto``. On a CPU, bf16 is
native with AVX512-BF16 or AMX (Zen 4, Sapphire Rapids and later); without them oneDNN emulates
it, and a training step of the fast recipe's network ran at **about 0.1× its fp32 speed** on an
AVX2 Zen 3 (``benchmarks/precision.py``: 0.105× median of 3 interleaved rounds; docs/benchmarks.md). On a GPU bf16 is native from Ampere on;
older GPUs get fp16 autocast, their fast path. Lightning has no ``auto`` precision, so the
entry points resolve it here before building the Trainer and log one line saying what was
chosen and why.
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)

AUTO = "auto"
BF16 = "bf16-mixed"
# What emulated bf16 cost where it was measured: one training step of cifar10_fast's network.
EMULATED_BF16_COST = (
    "about 0.1x the fp32 speed for experiment=cifar10_fast's network on an AVX2 CPU "
    "(AMD EPYC Zen 3, benchmarks/precision.py)"
)
_warned: set[str] = set()


def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX: the CPU instructions oneDNN's bf16 kernels run natively on."""
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def cuda_has_native_bf16() -> bool:
    """A CUDA device of compute capability 8.0 or newer (Ampere on): bf16 tensor cores."""
    return bool(torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8)


def target_device(accelerator: str | None) -> str:
    """``cpu`` or ``cuda``: where a Trainer with this ``accelerator`` setting runs."""
    accelerator = str(accelerator or AUTO).lower()
    if accelerator in ("gpu", "cuda"):
        return "cuda"
    if accelerator == AUTO and torch.cuda.is_available():
        return "cuda"
    return "cpu"  # mps/tpu/others resolve to fp32 through the CPU rule's "no native bf16"


def resolve_precision(precision, accelerator: str | None = AUTO) -> str:
    """The Trainer's precision for ``trainer.precision``: ``auto`` becomes ``bf16-mixed`` where
    bf16 is native, else ``32-true`` on a CPU and ``16-mixed`` on an older GPU, and one log line
    says which and why; any other value is kept as given (an explicit ``bf16-mixed`` on a CPU
    without native bf16 warns once with its measured cost)."""
    device = target_device(accelerator)
    if str(precision) != AUTO:
        if str(precision).startswith("bf16") and device == "cpu" and not cpu_has_native_bf16():
            warn_once(
                "emulated-bf16",
                f"trainer.precision={precision} on a CPU without native bf16 "
                f"({cpu_description()}): oneDNN emulates it, measured at {EMULATED_BF16_COST}. "
                "Set trainer.precision=auto (or 32-true) to train in fp32 here.",
            )
        return str(precision)
    chosen, reason = choose_auto(device)
    log.info("trainer.precision=auto -> %s: %s.", chosen, reason)
    return chosen


def choose_auto(device: str) -> tuple[str, str]:
    """``(precision, reason)`` that ``auto`` means on ``device`` (``cpu`` or ``cuda``)."""
    if device == "cuda":
        if cuda_has_native_bf16():
            return BF16, f"the GPU ({torch.cuda.get_device_name()}) runs bf16 natively"
        return "16-mixed", "the GPU has no native bf16 (compute capability < 8.0): fp16 autocast"
    if cpu_has_native_bf16():
        return BF16, f"the CPU runs bf16 natively ({cpu_description()})"
    return "32-true", f"the CPU has no native bf16 ({cpu_description()}): emulated bf16 is slower"


def cpu_description() -> str:
    """What the CPU offers for bf16, in the words torch uses."""
    capability = torch.backends.cpu.get_cpu_capability()
    extras = [
        name
        for name, present in (
            ("AVX512-BF16", torch.cpu._is_avx512_bf16_supported()),
            ("AMX", torch.cpu._is_amx_tile_supported()),
        )
        if present
    ]
    return (
        "capability "
        + capability
        + (", " + ", ".join(extras) if extras else ", no AVX512-BF16/AMX")
    )


def warn_once(key: str, message: str) -> None:
    """Log ``message`` as a warning the first time ``key`` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        log.warning(message)
