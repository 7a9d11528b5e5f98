"""OpenVINO runtime for ``.xml`` (+ ``.bin``) models written by ``export=openvino``.

The input spec travels in the model's ``rt_info`` under ``lightning_cls/<key>`` (one JSON
value per key, as in ONNX ``metadata_props``), next to ``lightning_cls/inference_precision``:
the precision the exporter chose and validated (``f32``, or ``bf16`` on CPUs with bf16
support). OpenVINO's own default on such CPUs is bf16, so the runtime always sets the hint
explicitly: a file runs at the precision its accuracy was checked at.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lightning_cls.inference.arrays import as_kind, as_numpy, call_numpy
from lightning_cls.inference.artifact_checks import check_declared_shapes, unreadable_as
from lightning_cls.inference.runtimes import FEATURES_OUTPUT, Runtime
from lightning_cls.inference.spec import InputSpec, merge_spec, props_to_dict

RT_SECTION = "lightning_cls"
PRECISION_KEY = "inference_precision"
PRECISIONS = ("f32", "bf16")


def read_rt_props(model) -> dict[str, str]:
    """The ``lightning_cls`` section of an ``ov.Model``'s rt_info as a string map."""
    if not model.has_rt_info([RT_SECTION]):
        return {}
    section = model.get_rt_info([RT_SECTION]).astype(dict)
    return {key: value.astype(str) for key, value in section.items()}


class _SignalStack(ctypes.Structure):
    """Linux's ``stack_t``."""

    _fields_ = [
        ("ss_sp", ctypes.c_void_p),
        ("ss_flags", ctypes.c_int),
        ("ss_size", ctypes.c_size_t),
    ]


@contextlib.contextmanager
def signal_stack_kept() -> Iterator[None]:
    """Put this thread's alternate signal stack back when the block ends.

    OpenVINO's CPU plugin points the thread that compiles a model at an alternate signal stack
    of its own (``sigaltstack``), and puts the old one back only in the thread that destroys
    its ``Core``. When that is another thread (Python's garbage collector runs wherever it
    happens to), the plugin's stack is unmapped while the compiling thread still points at it,
    and the next signal that thread gets (SIGCHLD, SIGTERM) kills the process with a SIGSEGV
    from the kernel, before faulthandler can print anything. Linux only; elsewhere a no-op.
    """
    if not sys.platform.startswith("linux"):
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    saved = _SignalStack()
    ok = libc.sigaltstack(None, ctypes.byref(saved)) == 0
    try:
        yield
    finally:
        if ok:
            libc.sigaltstack(ctypes.byref(saved), None)


def compile_model(
    model,
    threads: int | None = None,
    precision: str = "f32",
    extra: Mapping[str, Any] | None = None,
):
    """An OpenVINO CPU ``CompiledModel`` with the latency hint (one stream) at ``precision``,
    plus ``extra`` properties (``{"PERF_COUNT": True}``); the calling thread keeps its own
    signal stack (``signal_stack_kept``)."""
    import openvino as ov

    if precision not in PRECISIONS:
        raise ValueError(f"Unknown OpenVINO precision '{precision}'; use one of {PRECISIONS}.")
    config: dict[str, Any] = {
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": precision,
        **(extra or {}),
    }
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    with signal_stack_kept():
        return ov.Core().compile_model(model, "CPU", config)


class OpenVINORuntime(Runtime):
    """An OpenVINO IR model (``model.xml`` with ``model.bin`` beside it) on the CPU plugin."""

    kind = "openvino"
    arrays = "numpy"  # takes and gives numpy: predict and serve of a .xml never import torch

    def __init__(
        self, path, *, spec=None, threads=None, device="cpu", model_name=None, model_kwargs=None
    ):
        import openvino as ov

        path = Path(path)
        if not path.with_suffix(".bin").is_file():
            raise FileNotFoundError(
                f"{path.name} needs its weights file {path.with_suffix('.bin').name} beside it; "
                "copy both files of the OpenVINO export."
            )
        self.device = "cpu"
        with unreadable_as(path, "an OpenVINO IR model"):
            model = ov.Core().read_model(str(path))
        props = read_rt_props(model)
        self.precision = props.pop(PRECISION_KEY, "f32")
        stored = props_to_dict(props, f"{path.name} (rt_info)") or None
        self.spec = merge_spec(stored, spec, f"{path.name} (rt_info)")
        check_declared_shapes(
            path,
            self.spec,
            _dims(model.input(0).partial_shape),
            _dims(model.output(0).partial_shape),
        )
        self.compiled = compile_model(model, threads, self.precision)
        self.request = self.compiled.create_infer_request()
        named = [o for o in self.compiled.outputs[1:] if FEATURES_OUTPUT in o.get_names()]
        self.features_output = named[0] if named else None
        self.gives_features = self.features_output is not None

    def __call__(self, x):
        """Normalized float (B, C, H, W) -> logits (B, K): numpy in, numpy out (a tensor in, a
        tensor out)."""
        return call_numpy(self._infer, x)

    def _infer(self, x):
        result = self.request.infer({0: x})
        return result[self.compiled.output(0)].copy()

    def outputs(self, x):
        if not self.gives_features:
            return self(x), None
        result = self.request.infer({0: np.ascontiguousarray(as_numpy(x))})
        logits, features = (
            result[o].copy() for o in (self.compiled.output(0), self.features_output)
        )
        return as_kind(logits, x), as_kind(features, x)


def _dims(shape) -> list[int | None]:
    """An OpenVINO ``PartialShape`` as ints, None where a dimension is dynamic."""
    return [d.get_length() if d.is_static else None for d in shape]


def spec_props(spec: InputSpec, precision: str) -> Mapping[str, str]:
    """What the exporter writes into rt_info: the spec's props and the validated precision."""
    return {**spec.to_props(), PRECISION_KEY: precision}
