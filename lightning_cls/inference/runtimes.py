"""Runtimes: one small class per artifact format, chosen by file suffix from ``RUNTIMES``
(the one ``lightning_cls.registry.Registry``, keyed by suffix; plug-ins: the
``lightning_cls.runtimes`` entry-point group).

A runtime loads one file, resolves its ``InputSpec`` (stored in the file, or beside it, with
caller overrides on top) and maps a normalized float batch (B, C, H, W) to logits (B, classes).

Adding a runtime (e.g. OpenVINO for ``.xml``) is one subclass of ``Runtime`` that sets
``kind``, loads in ``__init__`` (setting ``self.spec``) and implements ``__call__``, plus one
line: ``register_runtime(".xml", OpenVINORuntime)``, or a lazy entry that imports its module
only when such a file is opened: ``RUNTIMES.register(".xml",
"lightning_cls.inference.openvino:OpenVINORuntime")`` (below).
``Predictor`` and the server pick it up from the suffix; nothing else changes.

Trust: a runtime whose loading can run code from the file (``runs_code = True``: ``.pt2``,
TorchScript) takes ``trust_artifact`` and refuses the file with an ``UntrustedArtifactError``
unless it is ``True``, so every way in (``load_artifact``, ``open_runtime``,
``runtime_for(path)(path)``, ``RUNTIMES[".pt2"](path)``) refuses an untrusted file before
a byte of it is unpickled.
"""

from __future__ import annotations

import json
import warnings
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from lightning_cls.inference.arrays import as_kind, as_numpy, call_numpy
from lightning_cls.inference.artifact_checks import (  # noqa: F401 (the trust gate: re-exported)
    UntrustedArtifactError,
    check_declared_shapes,
    holds_torchscript,
    quiet_logger,
    refuse_untrusted,
    unreadable_as,
)
from lightning_cls.inference.feature_rules import OUTPUT_NAME as FEATURES_OUTPUT
from lightning_cls.inference.spec import META_FILE, InputSpec, merge_spec, props_to_dict
from lightning_cls.registry import Registry

if TYPE_CHECKING:
    import torch


class Runtime:
    """Base class: ``spec``, ``kind``, ``device`` and ``__call__(x) -> logits``.

    ``threads`` is the intra-op thread budget where the runtime has its own pool (ONNX
    Runtime); PyTorch's pool is process-wide, so callers set ``torch.set_num_threads``.
    """

    kind: ClassVar[str] = ""
    # True where loading the file can run code from it (pickle, TorchScript): such a runtime
    # takes ``trust_artifact`` and calls ``refuse_untrusted`` before it opens the file.
    runs_code: ClassVar[bool] = False
    # What ``__call__`` takes and gives: "torch" tensors, or "numpy" arrays (ONNX Runtime,
    # OpenVINO: ``Predictor`` then computes with numpy, and predict/serve never import torch).
    arrays: ClassVar[str] = "torch"
    spec: InputSpec

    def __init__(
        self,
        path: Path,
        *,
        spec: Mapping[str, Any] | None = None,
        threads: int | None = None,
        device: str = "cpu",
        model_name: str | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
    ):
        raise NotImplementedError

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # Whether ``outputs`` gives the penultimate features too (an exported file: when it was
    # written with a ``features`` output, for a feature-space rejection rule).
    gives_features: bool = False

    def outputs(self, x):
        """Normalized float (B, C, H, W) -> ``(logits (B, K), features (B, D) or None)``."""
        return self(x), None


def split_outputs(out) -> tuple:
    """A module's answer -> ``(logits, features or None)``: a file exported with a feature
    output answers a pair, others the logits alone."""
    if isinstance(out, (tuple, list)):
        return out[0], (out[1] if len(out) > 1 else None)
    return out, None


class TorchRuntime(Runtime):
    """Eager PyTorch from a Lightning ``.ckpt`` or a bare ``model_weights.pt`` state_dict."""

    kind = "ckpt"

    def __init__(
        self, path, *, spec=None, threads=None, device="cpu", model_name=None, model_kwargs=None
    ):
        # Imported here: it builds networks (torchvision, timm), which ONNX serving never needs.
        from lightning_cls.inference.torch_models import load_torch_model

        self.kind = "ckpt" if path.suffix == ".ckpt" else "weights"
        import torch  # here: the ONNX and OpenVINO paths never import it

        self.device = torch.device(device)
        net, self.spec = load_torch_model(path, model_name, spec, model_kwargs)
        self.net = net.to(self.device)
        self._feature_net = None

    gives_features = True  # any network with a linear head (``network.FeatureNet``)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def outputs(self, x):
        if self._feature_net is None:
            from lightning_cls.inference.network import with_features

            self._feature_net = with_features(self.net, self.spec.input_shape)
        return self._feature_net(x)


class TorchScriptRuntime(Runtime):
    """A TorchScript archive: compiled code, run by ``torch.jit`` (it can run code: trusted only)."""

    kind = "torchscript"
    runs_code = True

    def __init__(
        self,
        path,
        *,
        spec=None,
        threads=None,
        device="cpu",
        model_name=None,
        model_kwargs=None,
        trust_artifact: bool = False,
    ):
        refuse_untrusted(path, self.kind, trust_artifact)
        import torch  # here: the ONNX and OpenVINO paths never import it

        self.device = torch.device(device)
        extra = {META_FILE: ""}
        with quiet_jit(), unreadable_as(path, "a TorchScript archive"):
            module = torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
        self.spec = merge_spec(
            _stored_json(extra[META_FILE], path), spec, f"{path.name} ({META_FILE} inside)"
        )
        self.module = module.eval().to(self.device)
        # What the archive answers, not what the spec asks: a pair is (logits, features).
        returns = module.forward.schema.returns
        self.gives_features = bool(returns) and isinstance(returns[0].type, torch.TupleType)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.outputs(x)[0]

    def outputs(self, x):
        with quiet_jit():
            return split_outputs(self.module(x))


class Pt2Runtime(Runtime):
    """A torch.export program; runs its ``ExportedProgram.module()``."""

    kind = "pt2"
    # torch.export.load unpickles weights and constants with weights_only=False (PyTorch 2.14):
    # a crafted .pt2 runs code on load, and no public option turns that off.
    runs_code = True

    def __init__(
        self,
        path,
        *,
        spec=None,
        threads=None,
        device="cpu",
        model_name=None,
        model_kwargs=None,
        trust_artifact: bool = False,
    ):
        refuse_untrusted(path, self.kind, trust_artifact)
        import torch  # here: the ONNX and OpenVINO paths never import it

        self.device = torch.device(device)
        extra = {META_FILE: ""}
        with unreadable_as(path, "a torch.export .pt2 program"):
            if not zipfile.is_zipfile(path):
                raise ValueError("not a zip archive")
            # torch logs the first failure with a traceback before trying an older format.
            with quiet_logger("torch.export"):
                program = torch.export.load(str(path), extra_files=extra)
        self.spec = merge_spec(
            _stored_json(extra[META_FILE], path), spec, f"{path.name} ({META_FILE} inside)"
        )
        self.module = program.module().to(self.device)
        # What the program answers, not what the spec asks: a second output is the features.
        self.gives_features = len(program.graph_signature.user_outputs) > 1

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.outputs(x)[0]

    def outputs(self, x):
        return split_outputs(self.module(x))


class OnnxRuntime(Runtime):
    """ONNX Runtime, CPU provider, full graph optimization, ``threads`` intra-op threads.

    The spec is read through ORT's own metadata map, so serving needs no ``onnx`` package.
    """

    kind = "onnx"
    arrays = "numpy"

    def __init__(
        self, path, *, spec=None, threads=None, device="cpu", model_name=None, model_kwargs=None
    ):
        self.device = "cpu"
        with unreadable_as(path, "an ONNX model"):
            self.session = make_session(path, threads)
        props = self.session.get_modelmeta().custom_metadata_map
        stored = props_to_dict(props, f"{path.name} (metadata_props)") or None
        self.spec = merge_spec(stored, spec, f"{path.name} (metadata_props)")
        first, out = self.session.get_inputs()[0], self.session.get_outputs()[0]
        self.input_name, self.output_name = first.name, out.name
        names = [o.name for o in self.session.get_outputs()]
        self.gives_features = FEATURES_OUTPUT in names[1:]
        check_declared_shapes(path, self.spec, first.shape, out.shape)

    def __call__(self, x):
        """Normalized float (B, C, H, W) -> logits (B, K): numpy in, numpy out (a tensor in, a
        tensor out)."""
        return call_numpy(self._run, x)

    def _run(self, x):
        (logits,) = self.session.run([self.output_name], {self.input_name: x})
        return logits

    def outputs(self, x):
        if not self.gives_features:
            return self(x), None
        names = [self.output_name, FEATURES_OUTPUT]
        feed = {self.input_name: np.ascontiguousarray(as_numpy(x))}
        return tuple(as_kind(out, x) for out in self.session.run(names, feed))


def _stored_json(text: str, path: Path) -> dict | None:
    """The spec a TorchScript/.pt2 file stores as ``meta.json`` (None when it has none)."""
    if not text:
        return None
    try:
        stored = json.loads(text)
    except json.JSONDecodeError:
        stored = None
    if not isinstance(stored, dict):
        raise ValueError(
            f"{path.name}: its {META_FILE} is not a JSON object; re-export the model, or pass "
            "the whole spec (+spec.classes=... +spec.mean=... +spec.std=... +spec.image_size=... "
            "+spec.num_channels=...)."
        )
    return stored


def make_session(path: str | Path, threads: int | None = None, spinning: bool | None = None):
    """An ONNX Runtime CPU session with full graph optimization and one intra-op pool;
    ``spinning=False`` stops its threads spinning between calls (None: ORT's default)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if spinning is not None:
        options.add_session_config_entry("session.intra_op.allow_spinning", str(int(spinning)))
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


# suffix -> runtime class. ``.pt``/``.pth`` are weights unless the archive holds TorchScript code.
RUNTIMES = Registry("runtime", "lightning_cls.runtimes")
for _suffix, _runtime in {
    ".ckpt": TorchRuntime,
    ".pt": TorchRuntime,
    ".pth": TorchRuntime,
    ".torchscript": TorchScriptRuntime,
    ".pt2": Pt2Runtime,
    ".onnx": OnnxRuntime,
}.items():
    RUNTIMES.register(_suffix)(_runtime)
# OpenVINO IR (export=openvino): its module is imported when a .xml is opened.
RUNTIMES.register(".xml", "lightning_cls.inference.openvino:OpenVINORuntime")
# On-device formats (export=executorch, ...): each module is imported when such a file is opened.
RUNTIMES.register(".pte", "lightning_cls.inference.executorch:ExecuTorchRuntime")
RUNTIMES.register(".tflite", "lightning_cls.inference.litert:LiteRTRuntime")
RUNTIMES.register(".mlpackage", "lightning_cls.inference.coreml:CoreMLRuntime")
FOLDER_SUFFIXES = (".mlpackage",)  # artifacts that are folders, not files


def register_runtime(suffix: str, runtime: type[Runtime]) -> None:
    """Serve files ending in ``suffix`` (".xml") with ``runtime``; a taken suffix is an error."""
    if suffix in RUNTIMES and RUNTIMES[suffix] is not runtime:
        raise ValueError(f"Suffix {suffix} is already served by {RUNTIMES[suffix].__name__}.")
    RUNTIMES.register(suffix)(runtime)


def runtime_for(path: Path) -> type[Runtime]:
    """The runtime class for ``path``, from its suffix (and, for ``.pt``/``.pth``, its content).

    A class with ``runs_code`` refuses the file when called without ``trust_artifact=True``.
    """
    path = Path(path)
    if not (path.is_file() or (path.is_dir() and path.suffix in FOLDER_SUFFIXES)):
        raise FileNotFoundError(f"Model artifact not found: {path}; check the path.")
    if path.suffix not in RUNTIMES:
        raise ValueError(
            f"Cannot tell what kind of model {path.name} is from its suffix '{path.suffix}'; "
            f"use one of {', '.join(sorted(RUNTIMES))}."
        )
    runtime = RUNTIMES[path.suffix]
    # A TorchScript archive holds compiled code; a state_dict archive holds only data.
    if path.suffix in (".pt", ".pth") and holds_torchscript(path):
        return TorchScriptRuntime
    return runtime


def open_runtime(path: str | Path, *, trust_artifact: bool = False, **options: Any) -> Runtime:
    """``path`` loaded by the runtime for its suffix (``options``: ``spec``, ``threads``, ...).

    A file that can run code when loaded needs ``trust_artifact=True``, else
    ``UntrustedArtifactError`` before it is opened; other runtimes never see the flag.
    """
    path = Path(path)
    runtime_cls = runtime_for(path)
    if runtime_cls.runs_code:
        refuse_untrusted(path, runtime_cls.kind, trust_artifact)
        options["trust_artifact"] = trust_artifact
    return runtime_cls(path, **options)


@contextmanager
def quiet_jit() -> Iterator[None]:
    """Silence torch.jit's per-call deprecation warnings (documented once in docs/export.md)."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", category=FutureWarning, message=r".*torch\.jit.*deprecated"
        )
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*TorchScript.*")
        yield


def artifact_kind(path: str | Path) -> str:
    """The kind of artifact ``path`` is (``ckpt``, ``weights``, ``torchscript``, ``onnx``, ...)."""
    path = Path(path)
    runtime = runtime_for(path)
    if runtime is RUNTIMES[".ckpt"]:
        return "ckpt" if path.suffix == ".ckpt" else "weights"
    return runtime.kind
