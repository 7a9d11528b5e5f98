"""TorchScript export, by tracing or scripting, each reloaded and checked against eager.

TorchScript is deprecated in current PyTorch (``torch.jit`` warns on use); it is kept for
runtimes that still need it. Prefer ``.pt2`` (``lightning_cls.export.pt2``) for new work.

- ``trace`` records the operations one example input takes: Python control flow that depends
  on the data (``if x.sum() > 0``) is frozen to the branch the example took, silently.
- ``script`` compiles the Python source, keeping control flow, but accepts only the
  TorchScript subset of Python (no imports inside ``forward``, typed containers, ...).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from lightning_cls.export.checks import check_round_trip, example_batch
from lightning_cls.fileio import atomic_path
from lightning_cls.inference.runtimes import TorchScriptRuntime, quiet_jit
from lightning_cls.inference.spec import META_FILE, InputSpec

log = logging.getLogger(__name__)

MODES = ("trace", "script")
SUFFIX = ".torchscript"


def to_torchscript(net: nn.Module, spec: InputSpec, mode: str = "trace") -> torch.jit.ScriptModule:
    """Trace or script ``net`` (switched to eval mode, which the caller restores)."""
    if mode not in MODES:
        raise ValueError(f"Unknown TorchScript mode '{mode}'; use one of {', '.join(MODES)}.")
    net.eval()
    with quiet_jit():
        if mode == "trace":
            # check_trace compares a second run of the trace with eager on the same input.
            return torch.jit.trace(net, example_batch(spec, 2), check_trace=True)
        try:
            return torch.jit.script(net)
        except Exception as err:  # TorchScript raises its own frontend error types
            raise ValueError(
                f"torch.jit.script cannot compile {type(net).__name__}: {err}\n"
                "Use mode='trace' (export.torchscript_modes=[trace]; fine without data-dependent "
                "control flow in forward), or export .pt2."
            ) from err


def export_torchscript(
    net: nn.Module,
    spec: InputSpec,
    path: str | Path,
    mode: str = "trace",
    check_batch_sizes: Sequence[int] = (1, 7),
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> Path:
    """Save ``net`` as TorchScript (``meta.json`` inside), reload it and compare with eager."""
    path = Path(path)
    was_training = net.training
    try:
        scripted = to_torchscript(net, spec, mode)
        # Saved and checked under a temp name: a failed check leaves an earlier file intact.
        with atomic_path(path) as tmp:
            with quiet_jit():
                torch.jit.save(scripted, str(tmp), _extra_files={META_FILE: spec.to_json()})
            loaded, loaded_spec = load_torchscript(tmp)
            with quiet_jit():
                check_round_trip(
                    net,
                    loaded,
                    spec,
                    loaded_spec,
                    check_batch_sizes,
                    atol,
                    rtol,
                    f"TorchScript ({mode})",
                )
    finally:
        net.train(was_training)
    log.info("Exported TorchScript (%s) to %s", mode, path)
    return path


def load_torchscript(path: str | Path) -> tuple[torch.jit.ScriptModule, InputSpec]:
    """The scripted module (eval mode, CPU) and the spec stored inside it."""
    runtime = TorchScriptRuntime(Path(path))
    return runtime.module, runtime.spec
