"""torch.export ``.pt2`` programs with a dynamic batch dimension: the modern TorchScript.

A ``.pt2`` holds an ``ExportedProgram`` (an ATen graph + weights); ``torch.export.load``
brings it back without the model's Python code. ``meta.json`` travels inside as an extra file.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from lightning_cls.export.checks import check_round_trip, example_batch
from lightning_cls.fileio import atomic_path
from lightning_cls.inference.runtimes import Pt2Runtime
from lightning_cls.inference.spec import META_FILE, InputSpec

log = logging.getLogger(__name__)

SUFFIX = ".pt2"


def to_exported_program(net: nn.Module, spec: InputSpec) -> torch.export.ExportedProgram:
    """``torch.export.export`` of ``net`` in eval mode, batch axis dynamic (any size >= 1)."""
    net.eval()
    batch = torch.export.Dim("batch", min=1)
    return torch.export.export(net, (example_batch(spec, 2),), dynamic_shapes=({0: batch},))


def export_pt2(
    net: nn.Module,
    spec: InputSpec,
    path: str | Path,
    check_batch_sizes: Sequence[int] = (1, 7),
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> Path:
    """Save ``net`` as a ``.pt2`` program, reload it and compare with eager at other batch sizes."""
    path = Path(path)
    was_training = net.training
    try:
        program = to_exported_program(net, spec)
        # Saved and checked under a temp name: a failed check leaves an earlier file intact.
        with atomic_path(path, keep_suffix=True) as tmp:
            torch.export.save(program, str(tmp), extra_files={META_FILE: spec.to_json()})
            loaded, loaded_spec = load_pt2(tmp)
            check_round_trip(net, loaded, spec, loaded_spec, check_batch_sizes, atol, rtol, ".pt2")
    finally:
        net.train(was_training)
    log.info("Exported torch.export program to %s", path)
    return path


def load_pt2(path: str | Path) -> tuple[nn.Module, InputSpec]:
    """The program's callable module (``ExportedProgram.module()``) and its spec."""
    runtime = Pt2Runtime(Path(path))
    return runtime.module, runtime.spec
