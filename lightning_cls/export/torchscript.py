"""TorchScript export, by tracing or scripting, each reloaded and checked against eager.

TorchScript is deprecated in current PyTorch (``torch.jit`` warns on use); it is kept for
runtimes that still need it. Prefer ``.pt2`` (``lightning_cls.export.pt2``) for new work.

- ``trace`` records the operations one example input takes: Python control flow that depends
  on the data (``if x.sum() > 0``) is frozen to the branch the example took, silently.
- ``script`` compiles the Python source, keeping control flow, but accepts only the
  TorchScript subset of Python (no imports inside ``forward``, typed containers, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from lightning_cls.export.writer import Writer
from lightning_cls.fileio import atomic_path
from lightning_cls.inference.runtimes import TorchScriptRuntime, quiet_jit
from lightning_cls.inference.spec import META_FILE, InputSpec

MODES = ("trace", "script")


def to_torchscript(
    net: nn.Module, example: torch.Tensor, mode: str = "trace"
) -> torch.jit.ScriptModule:
    """Trace ``net`` on ``example`` or script it (``net`` in eval mode)."""
    with quiet_jit():
        if mode == "trace":
            # check_trace compares a second run of the trace with eager on the same input.
            return torch.jit.trace(net, example, check_trace=True)
        try:
            return torch.jit.script(net)
        except Exception as err:  # TorchScript raises its own frontend error types
            raise ValueError(
                f"torch.jit.script cannot compile {type(net).__name__}: {err}\n"
                "Use mode='trace' (export.torchscript.modes=[trace]; fine without data-dependent "
                "control flow in forward), or export .pt2."
            ) from err


@dataclass
class TorchScriptOptions:
    """``export.torchscript.*`` (conf/export/torchscript.yaml)."""

    modes: list[str] = field(default_factory=lambda: list(MODES))  # one file per mode

    def __post_init__(self):
        unknown = [mode for mode in self.modes if mode not in MODES]
        if unknown or not self.modes:
            raise ValueError(
                f"export.torchscript.modes={list(self.modes)} is not a list of "
                f"{' and/or '.join(MODES)}; e.g. export.torchscript.modes=[trace]."
            )
        self.modes = list(self.modes)


class TorchScriptWriter(Writer):
    """``model_<mode>.torchscript`` with ``meta.json`` inside, read back by ``torch.jit``."""

    Options = TorchScriptOptions

    def __init__(self, mode: str = "trace"):
        if mode not in MODES:
            raise ValueError(f"Unknown TorchScript mode '{mode}'; use one of {', '.join(MODES)}.")
        self.mode = mode
        self.key, self.file = f"torchscript_{mode}", f"model_{mode}.torchscript"
        self.title = f"TorchScript ({mode})"

    @classmethod
    def from_options(cls, options, config):
        return [cls(mode) for mode in options.modes]

    @classmethod
    def candidates(cls, options):
        return {"torchscript": cls("trace")}  # the PyTorch reference of export=auto

    def copy_tagged(self, src, dst, key, text):
        return copy_tagged(src, dst, key, text)

    def write(self, net, example, tmp, spec):
        scripted = to_torchscript(net, example, self.mode)
        with quiet_jit():
            torch.jit.save(scripted, str(tmp), _extra_files={META_FILE: spec.to_json()})


def copy_tagged(src: Path, dst: Path, key: str, text: str) -> Path:
    """``src`` copied to ``dst`` with ``text`` as the extra file ``<key>.json`` beside
    ``meta.json``."""
    extra = {META_FILE: ""}
    with quiet_jit():
        module = torch.jit.load(str(src), _extra_files=extra)
        extra[f"{key}.json"] = text
        with atomic_path(dst) as tmp:
            torch.jit.save(module, str(tmp), _extra_files=extra)
    return dst


def load_torchscript(
    path: str | Path, trust_artifact: bool = False
) -> tuple[torch.jit.ScriptModule, InputSpec]:
    """The scripted module (eval mode, CPU) and the spec stored inside it; a TorchScript file
    runs code when loaded, so it needs ``trust_artifact=True``."""
    runtime = TorchScriptRuntime(Path(path), trust_artifact=trust_artifact)
    return runtime.module, runtime.spec
