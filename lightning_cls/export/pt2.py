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

from lightning_cls.export.meta import META_FILE, ModelMeta, check_round_trip, example_batch
from lightning_cls.fileio import atomic_path

log = logging.getLogger(__name__)

SUFFIX = ".pt2"


def to_exported_program(net: nn.Module, meta: ModelMeta) -> torch.export.ExportedProgram:
    """``torch.export.export`` of ``net`` in eval mode, batch axis dynamic (any size >= 1)."""
    net.eval()
    batch = torch.export.Dim("batch", min=1)
    return torch.export.export(net, (example_batch(meta, 2),), dynamic_shapes=({0: batch},))


def export_pt2(
    net: nn.Module,
    meta: ModelMeta,
    path: str | Path,
    check_batch_sizes: Sequence[int] = (1, 7),
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> Path:
    """Save ``net`` as a ``.pt2`` program, reload it and compare with eager at other batch sizes."""
    path = Path(path)
    was_training = net.training
    try:
        program = to_exported_program(net, meta)
        # Saved and checked under a temp name: a failed check leaves an earlier file intact.
        with atomic_path(path, keep_suffix=True) as tmp:
            torch.export.save(program, str(tmp), extra_files={META_FILE: meta.to_json()})
            loaded, loaded_meta = load_pt2(tmp)
            check_round_trip(net, loaded, meta, loaded_meta, check_batch_sizes, atol, rtol, ".pt2")
    finally:
        net.train(was_training)
    log.info("Exported torch.export program to %s", path)
    return path


def load_pt2(path: str | Path) -> tuple[nn.Module, ModelMeta]:
    """The program's callable module (``ExportedProgram.module()``) and its ``ModelMeta``."""
    extra = {META_FILE: ""}
    program = torch.export.load(str(path), extra_files=extra)
    if not extra[META_FILE]:
        raise ValueError(f"{path} has no {META_FILE}; export it with lightning_cls.export.")
    return program.module(), ModelMeta.from_json(extra[META_FILE])
