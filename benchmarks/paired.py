"""Helpers shared by the benchmark scripts: paired per-round ratios, the CPU's name,
rewriting one marked section of ``docs/benchmarks.md``, and an untrained model exported to ONNX."""

from __future__ import annotations

import platform
import statistics
from collections.abc import Sequence
from pathlib import Path


def summarize(values: Sequence[float]) -> dict[str, float | list[float]]:
    """``{"median", "min", "max", "per_round"}`` of per-round values."""
    values = list(values)
    if not values:
        raise ValueError("summarize needs at least one round's value, got none.")
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "per_round": values,
    }


def paired_ratio(rounds: Sequence[dict[str, float]], num: str, den: str) -> dict:
    """``num / den`` computed inside each round (both timed under the same load), summarized."""
    return summarize([r[num] / r[den] for r in rounds])


def cpu_name() -> str:
    """The CPU model as /proc/cpuinfo names it (falls back to platform's guess)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def write_section(path: Path, start: str, end: str, section: str) -> None:
    """Replace the text between the ``start`` and ``end`` markers (or append the section)."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def export_untrained_onnx(name: str, path: Path) -> tuple:
    """``(net, spec, path)``: the registry's ``name`` with seeded random weights (10 classes,
    3 x 32 x 32) exported to ONNX at ``path``, for benchmarks and smoke runs whose timings do
    not depend on the weights' values."""
    import torch

    from lightning_cls.export import export_format
    from lightning_cls.inference.spec import InputSpec
    from lightning_cls.models import create_model

    torch.manual_seed(0)
    kwargs = dict(num_classes=10, in_channels=3, image_size=32)
    net = create_model(name, **kwargs).eval()
    spec = InputSpec(
        classes=[str(i) for i in range(10)],
        mean=(0.5,) * 3,
        std=(0.25,) * 3,
        image_size=32,
        num_channels=3,
        model_name=name,
        model_kwargs=kwargs,
    )
    return net, spec, export_format("onnx", net, spec, path)
