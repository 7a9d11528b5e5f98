"""``CompileModel``: ``torch.compile`` the network's forward, falling back to eager when the
compiler fails.

The network keeps its class and its submodules: only its ``forward`` (a public method) is
replaced, on the instance, by a guarded call of ``torch.compile(type(net).forward)``. So
``state_dict`` keys stay ``net.features.0.weight`` (never ``net._orig_mod.…``) and checkpoints
load into an uncompiled model; ``del net.forward`` undoes it.

Fallback. Compilation is lazy: it happens on the first forward. Only compiler failures are
caught — Dynamo unable to trace (``Unsupported``), a backend or Inductor failure
(``BackendCompilerFailed``/``InductorError``, ``TritonMissing``), a C++ toolchain error, an
internal Dynamo error. Those are raised while a frame is being compiled, before it runs, so the
eager call that follows is that forward's only execution. Everything else propagates
untouched: an out-of-memory error (also one wrapped by the compiler), and a bug in the model
that Dynamo's tracing finds (``TorchRuntimeError``, e.g. a shape mismatch), which eager mode
would hit too. With ``fullgraph=False`` a frame after a graph break compiles only when
reached, after the frames before it ran; a compiler failure there would repeat them eagerly,
so use ``fullgraph=True`` for models whose forward has side effects beyond BatchNorm
statistics. Errors while compiling the backward graph (during ``loss.backward()``) are not
caught. A missing toolchain (no C++ compiler for Inductor on CPU, no Triton on GPU) is
detected up front.
"""

from __future__ import annotations

import logging
import shutil
import types
import warnings
from collections.abc import Callable
from typing import Any

import pytorch_lightning as pl
import torch
from torch import nn
from torch._dynamo.exc import (
    BackendCompilerFailed,
    InternalTorchDynamoError,
    Unsupported,
)
from torch._inductor.exc import CppCompileError, InvalidCxxCompiler, TritonMissing

log = logging.getLogger(__name__)

MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# Failures of the compiler itself (InductorError is a BackendCompilerFailed).
COMPILE_ERRORS = (
    BackendCompilerFailed,
    Unsupported,
    InternalTorchDynamoError,
    TritonMissing,
    CppCompileError,
    InvalidCxxCompiler,
)


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


def is_compile_error(err: BaseException) -> bool:
    """A failure of the compiler (not of the model, not out of memory)."""
    inner = getattr(err, "inner_exception", None)
    return isinstance(err, COMPILE_ERRORS) and not isinstance(inner, torch.OutOfMemoryError)


def guarded(
    eager: Callable, compiled: Callable, on_failure: Callable[[BaseException], None]
) -> Callable:
    """``compiled(self, *args)``; after a compiler failure, ``eager(self, *args)`` from then on.

    Both take the module first, so the result is bound to the module as its ``forward``
    (``types.MethodType``): a ``copy.deepcopy`` of the module (EMA, SWA) rebinds it to the copy.
    """
    state = {"failed": False}

    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        if state["failed"]:
            return eager(self, *args, **kwargs)
        try:
            return compiled(self, *args, **kwargs)
        except Exception as err:
            if not is_compile_error(err):
                raise
            state["failed"] = True
            on_failure(err)
        return eager(self, *args, **kwargs)  # outside the except: no chained traceback

    return forward


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
        self.options = {
            "mode": mode,
            "backend": backend,
            "fullgraph": fullgraph,
            "dynamic": dynamic,
        }
        self.attribute = attribute
        self.failure: BaseException | None = None  # the compiler error that forced eager mode

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        net = getattr(pl_module, self.attribute, None)
        if not isinstance(net, nn.Module):
            raise ValueError(
                f"CompileModel(attribute={self.attribute!r}): {type(pl_module).__name__} has no "
                f"nn.Module attribute {self.attribute!r}; set attribute to the network's name."
            )
        if "forward" in vars(net):
            return  # already compiled (fit then test)
        reason = missing_toolchain(self.options["backend"], pl_module.device)
        if reason:
            warnings.warn(
                f"Not compiling: {reason}. Training runs eagerly.", UserWarning, stacklevel=2
            )
            return
        eager = type(net).forward  # the class's function; the instance comes as first argument
        forward = guarded(eager, torch.compile(eager, **self.options), self._fell_back)
        net.forward = types.MethodType(forward, net)
        log.info("Compiling %s with %s (first steps are slow).", self.attribute, self.options)

    def _fell_back(self, err: BaseException) -> None:
        self.failure = err
        message = " ".join(str(err).split())[:300]
        warnings.warn(
            f"torch.compile failed ({type(err).__name__}: {message}); training continues eagerly. "
            "Remove callbacks.compile to silence this.",
            UserWarning,
            stacklevel=2,
        )
