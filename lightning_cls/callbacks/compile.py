"""``CompileModel``: ``torch.compile`` the network in place, falling back to eager on failure.

``nn.Module.compile`` compiles the module's call without wrapping it, so ``state_dict`` keys
stay ``net.features.0.weight`` (never ``net._orig_mod.features.0.weight``) and checkpoints
load into an uncompiled model. Compilation is lazy: errors surface on the first forward, where
this callback catches them, warns once and continues eagerly. A missing toolchain (no C++
compiler for inductor on CPU, no Triton on GPU) is detected up front.
"""

from __future__ import annotations

import logging
import shutil
import warnings
from typing import Any

import pytorch_lightning as pl
import torch
from torch import nn

log = logging.getLogger(__name__)

MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def missing_toolchain(backend: str, device: torch.device) -> str | None:
    """Why ``backend`` cannot compile on ``device`` (or None when it looks usable)."""
    if backend != "inductor":
        return None
    if device.type == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            return "inductor on CUDA needs Triton (pip install triton)"
        return None
    if not any(shutil.which(cc) for cc in ("cc", "gcc", "clang", "c++", "g++", "cl")):
        return "inductor on CPU needs a C++ compiler (install gcc or clang)"
    return None


def compile_in_place(net: nn.Module, warn_once: list[bool], **options: Any) -> None:
    """``net.compile(**options)``, with the compiled call guarded: on any compile error, warn
    once and run eagerly from then on."""
    net.compile(**options)
    compiled = net._compiled_call_impl

    def guarded(*args, **kwargs):
        try:
            return compiled(*args, **kwargs)
        except Exception as err:  # dynamo/inductor raise many types; all mean "not compilable"
            net._compiled_call_impl = None  # back to the eager __call__
            if not warn_once[0]:
                warn_once[0] = True
                warnings.warn(
                    f"torch.compile failed ({type(err).__name__}: {' '.join(str(err).split())[:300]}); training "
                    "continues eagerly. Remove callbacks.compile to silence this.",
                    UserWarning, stacklevel=2,
                )  # fmt: skip
            return net._call_impl(*args, **kwargs)

    net._compiled_call_impl = guarded


class CompileModel(pl.Callback):
    """Compile ``pl_module.<attribute>`` (the bare network, ``net``) when fitting starts."""

    def __init__(
        self,
        mode: str | None = None,
        backend: str = "inductor",
        fullgraph: bool = False,
        dynamic: bool | None = None,
        attribute: str = "net",
    ):
        if mode not in MODES:
            raise ValueError(f"Unknown compile mode {mode!r}; use one of {MODES}.")
        self.options = {"mode": mode, "backend": backend, "fullgraph": fullgraph, "dynamic": dynamic}
        self.attribute = attribute
        self._warned = [False]

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        net = getattr(pl_module, self.attribute, None)
        if not isinstance(net, nn.Module):
            raise ValueError(
                f"CompileModel(attribute={self.attribute!r}): {type(pl_module).__name__} has no "
                f"nn.Module attribute {self.attribute!r}; set attribute to the network's name."
            )
        if getattr(net, "_compiled_call_impl", None) is not None:
            return  # already compiled (fit then test)
        reason = missing_toolchain(self.options["backend"], pl_module.device)
        if reason:
            warnings.warn(f"Not compiling: {reason}. Training runs eagerly.", UserWarning)
            return
        compile_in_place(net, self._warned, **self.options)
        log.info("Compiling %s with %s (first steps are slow).", self.attribute, self.options)
