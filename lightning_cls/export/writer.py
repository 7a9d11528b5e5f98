"""One shape for every export format: a ``Writer`` writes its file, ``write_verified`` does the rest.

A format is a ``Writer`` (``file``, ``title``, ``write``) registered in ``FORMATS`` with
``register_format``, as a runtime is registered in ``inference.runtimes.RUNTIMES``. The
skeleton is here once, for every format:

1. the network in eval mode (its mode restored in ``finally``);
2. ``writer.write`` writes under a hidden temp name in the target's folder (the suffix kept,
   so the runtime registry recognises it; companions such as OpenVINO's ``.bin`` beside it);
3. the temp file is read back through the runtime that will serve it (``writer.read_back``,
   by default ``RUNTIMES[suffix]``): it must carry the spec and reproduce eager PyTorch at each
   check batch size, else ``ExportCheckError`` (outputs) or ``ValueError`` (spec);
4. only then is it renamed over the final name (``lightning_cls.fileio``); on any failure the
   temp files are removed and an earlier file at the final name is left as it was.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from lightning_cls.export.checks import check_outputs_close, example_batch
from lightning_cls.fileio import atomic_path, atomic_paths
from lightning_cls.inference.network import with_features
from lightning_cls.inference.runtimes import FEATURES_OUTPUT, open_runtime
from lightning_cls.inference.spec import InputSpec

if TYPE_CHECKING:
    from lightning_cls.export.exporter import ExportConfig

log = logging.getLogger(__name__)

CHECK_BATCH_SIZES = (1, 7)


class Writer:
    """One export format's file. Subclasses set ``file``/``title`` and implement ``write``;
    the other methods have defaults that fit a file taking the normalized float batch."""

    key: str = ""  # its ExportResult.paths key ("onnx", "torchscript_trace")
    file: str = ""  # its name in an export folder ("model.onnx"); the suffix picks the runtime
    companions: tuple[str, ...] = ()  # suffixes of files written beside it (OpenVINO: ".bin")
    title: str = ""  # what messages call it ("ONNX", "TorchScript (trace)")
    # Whether the file gets a second output, the penultimate ``features``, when the spec's
    # rejection rule scores them (``reject=knn|mahalanobis``): ``write`` then receives a
    # ``network.FeatureNet`` answering ``(logits, features)``.
    features: bool = True

    def write(self, net: nn.Module | None, example: torch.Tensor, tmp: Path, spec: InputSpec):
        """Write the file at ``tmp`` (and its companions beside it, same stem)."""
        raise NotImplementedError

    def example(self, spec: InputSpec, batch_size: int, seed: int = 0) -> torch.Tensor:
        """The input the file takes: a normalized float batch (B, C, H, W)."""
        return example_batch(spec, batch_size, seed)

    def expected(self, net: nn.Module, spec: InputSpec, x: torch.Tensor) -> torch.Tensor:
        """What eager PyTorch answers for ``x``: the file must answer the same."""
        return net(x)

    def stored_spec(self, spec: InputSpec) -> InputSpec:
        """The spec the file must carry."""
        return spec

    def read_back(self, path: Path) -> tuple[Callable[[torch.Tensor], torch.Tensor], InputSpec]:
        """The file opened as it will be served: the runtime ``RUNTIMES`` picks by suffix."""
        runtime = open_runtime(path, trust_artifact=True)  # our own file, just written
        return runtime, runtime.spec


# format name -> writers(config, out): the Writers an ExportConfig asks of it, into folder out
WriterFactory = Callable[["ExportConfig", Path], list[Writer]]
# The built-in formats' modules, in the order export_model writes them (OpenVINO converts the
# ONNX file); each registers its writers when imported.
BUILTIN_FORMATS = ("onnx", "onnx_e2e", "torchscript", "pt2", "openvino")


class FormatRegistry(MutableMapping):
    """``FORMATS``: format name -> ``WriterFactory``. The built-in formats are imported on the
    first read (they import torch, onnx, ...), not when ``lightning_cls.export`` is, so
    ``python -m lightning_cls.export --help`` stays light (tests/test_layers.py). Reads list
    the built-ins first, in ``BUILTIN_FORMATS`` order (ONNX before OpenVINO, which converts
    it), then the others in registration order. Registering never imports anything: a
    built-in module registers itself while it is imported, whichever is imported first."""

    def __init__(self, builtins: Sequence[str]):
        self._writers: dict[str, WriterFactory] = {}
        self._builtins, self._loaded = tuple(builtins), False

    def _load(self) -> dict[str, WriterFactory]:
        if not self._loaded:
            for module in self._builtins:
                importlib.import_module(f"lightning_cls.export.{module}")
            order = [*(n for n in self._builtins if n in self._writers), *self._writers]
            self._writers = {name: self._writers[name] for name in order}
            self._loaded = True
        return self._writers

    def __getitem__(self, name: str) -> WriterFactory:
        return self._load()[name]

    def __setitem__(self, name: str, writers: WriterFactory) -> None:
        """Register (``register_format`` refuses a taken name); imports no built-in."""
        if self._writers.get(name, writers) is not writers:
            raise ValueError(f"Export format '{name}' is already registered; pick another name.")
        self._writers[name] = writers

    def __delitem__(self, name: str) -> None:
        del self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __repr__(self) -> str:
        return f"FormatRegistry({list(self)})"


FORMATS = FormatRegistry(BUILTIN_FORMATS)


def register_format(name: str, writers: WriterFactory) -> None:
    """Make ``export.formats=[name]`` write ``writers(config, out)``; a taken name is an error."""
    FORMATS[name] = writers


def write_verified(
    writer: Writer,
    net: nn.Module | None,
    spec: InputSpec,
    path: str | Path,
    check_batch_sizes: Sequence[int] = CHECK_BATCH_SIZES,
    atol: float = 1e-4,
    rtol: float = 1e-3,
) -> Path:
    """Write ``writer``'s file at ``path`` through the skeleton above; return ``path``.

    With ``net=None`` (a file converted from another verified file) only the spec is checked.
    """
    path = Path(path)
    files = [path.with_suffix(suffix) for suffix in writer.companions] + [path]
    was_training = net.training if net is not None else False
    if net is not None:
        net.eval()
    model = net
    if net is not None and writer.features and spec.decision.needs_features:
        model = with_features(net, spec.input_shape)  # (logits, features): two outputs
    try:
        with _temp_files(files) as temps:
            writer.write(model, writer.example(spec, 2), temps[-1], spec)
            run, stored = writer.read_back(temps[-1])
            if stored != writer.stored_spec(spec):
                raise ValueError(
                    f"The input spec did not survive the round trip: {stored} != "
                    f"{writer.stored_spec(spec)}."
                )
            if net is not None:
                what = f"{writer.title} {path.name}"  # the final name, not the temp one
                compare(writer, model, run, spec, check_batch_sizes, atol, rtol, what)
    finally:
        if net is not None:
            net.train(was_training)
    log.info("Exported %s to %s", writer.title, path)
    return path


def compare(writer, net, run, spec, batch_sizes, atol, rtol, what) -> None:
    """``run`` (the file read back) must match eager ``net`` at each batch size (a
    ``FeatureNet``: its logits, and its features against the runtime's ``outputs``)."""
    for seed, batch_size in enumerate(batch_sizes):
        x = writer.example(spec, batch_size, seed=seed)
        with torch.no_grad():
            expected = writer.expected(net, spec, x)
            if isinstance(expected, tuple):
                actual = run.outputs(x)
                where = f"{what} ({FEATURES_OUTPUT}) at batch {batch_size}"
                check_outputs_close(expected[1], actual[1], atol, rtol, where)
                expected, actual = expected[0], actual[0]
            else:
                actual = run(x)
        check_outputs_close(expected, actual, atol, rtol, f"{what} at batch {batch_size}")


@contextmanager
def _temp_files(files: list[Path]) -> Iterator[list[Path]]:
    """Hidden temp names keeping each suffix; renamed over ``files`` only if the block ends.

    One file is replaced in one rename (a reader always finds it); a pair lands together.
    """
    if len(files) == 1:
        with atomic_path(files[0], keep_suffix=True) as tmp:
            yield [tmp]
    else:
        with atomic_paths(*files) as temps:
            yield temps
