"""One shape for every export format: a ``Writer`` writes its file, ``write_verified`` does the rest.

A format is a ``Writer`` (``file``, ``title``, ``write``) registered in ``FORMATS`` with
``register_format``, as a runtime is registered in ``inference.runtimes.RUNTIMES``. A
*derived* format (an INT8 model of the ONNX file, the OpenVINO IR converted from it) is a
``Writer`` too: it names its ``source`` format (``ExportConfig`` refuses it without that
format), says whether it ``needs_data`` (the DataModule's train/val splits, handed to its
``write`` and ``check``) and overrides the one check hook (``export.int8``: the accuracy gate
instead of parity). The skeleton is here once, for every format:

1. the network in eval mode (its mode restored in ``finally``);
2. ``writer.write`` writes under a hidden temp name in the target's folder (the suffix kept,
   so the runtime registry recognises it; companions such as OpenVINO's ``.bin`` beside it);
3. the temp file is read back through the runtime that will serve it (``writer.read_back``,
   by default ``RUNTIMES[suffix]``): it must carry the spec and reproduce eager PyTorch at each
   check batch size, else ``ExportCheckError`` (outputs) or ``ValueError`` (spec): that is
   ``writer.check``'s default, which a derived format replaces (INT8: measured on the
   validation split against its source file, ``AccuracyDropError`` past the allowed drop);
4. only then is it renamed over the final name (``lightning_cls.fileio``); on any failure the
   temp files are removed and an earlier file at the final name is left as it was.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from lightning_cls.export.checks import check_outputs_close, example_batch
from lightning_cls.fileio import atomic_path, atomic_paths
from lightning_cls.inference.network import with_features
from lightning_cls.inference.runtimes import FEATURES_OUTPUT, open_runtime
from lightning_cls.inference.spec import InputSpec, Split

if TYPE_CHECKING:
    from lightning_cls.export.exporter import ExportConfig

log = logging.getLogger(__name__)

CHECK_BATCH_SIZES = (1, 7)
# A DataModule's splits by name ("train", "val"): what a writer with ``needs_data`` gets.
Splits = Mapping[str, Split]


@dataclass(frozen=True)
class Tolerance:
    """The parity check's settings (``ExportConfig.check_kwargs``)."""

    check_batch_sizes: Sequence[int] = CHECK_BATCH_SIZES
    atol: float = 1e-4
    rtol: float = 1e-3


@dataclass
class Written:
    """What the skeleton made: the file's final path, and its check's report (INT8: a
    ``QuantizationReport``; parity: None)."""

    path: Path
    report: object = None


class Writer:
    """One export format's file. Subclasses set ``file``/``title`` and implement ``write``;
    the other methods have defaults that fit a file taking the normalized float batch.

    A writer with ``needs_data`` gets the DataModule's splits as ``write(..., data=splits)``
    and in ``check``; the exporter refuses to run it without a DataModule."""

    key: str = ""  # its ExportResult.paths key ("onnx", "torchscript_trace")
    file: str = ""  # its name in an export folder ("model.onnx"); the suffix picks the runtime
    companions: tuple[str, ...] = ()  # suffixes of files written beside it (OpenVINO: ".bin")
    title: str = ""  # what messages call it ("ONNX", "TorchScript (trace)")
    # Whether the file gets a second output, the penultimate ``features``, when the spec's
    # rejection rule scores them (``reject=knn|mahalanobis``): ``write`` then receives a
    # ``network.FeatureNet`` answering ``(logits, features)``.
    features: bool = True
    # A derived format: the format whose file it is made from ("onnx"); ``ExportConfig``
    # refuses a request for it without that format (``requires``).
    source: str = ""
    needs_data: bool = False  # calibrates or is measured on the DataModule's splits

    @property
    def requires(self) -> tuple[str, ...]:
        """The formats that must be in ``export.formats`` too (default: its ``source``)."""
        return (self.source,) if self.source else ()

    def write(self, net: nn.Module | None, example: torch.Tensor, tmp: Path, spec: InputSpec):
        """Write the file at ``tmp`` (and its companions beside it, same stem)."""
        raise NotImplementedError

    def check(
        self,
        net: nn.Module | None,
        run: Callable[[torch.Tensor], torch.Tensor],
        spec: InputSpec,
        tmp: Path,
        path: Path,
        data: Splits | None,
        tolerance: Tolerance,
    ) -> object:
        """The check the file at ``tmp`` (read back as ``run``) passes before it is renamed to
        ``path``; it returns its report (or None) and raises to refuse the file. Default:
        parity with eager ``net`` at each check batch size (skipped without ``net``)."""
        if net is not None:
            what = f"{self.title} {path.name}"  # the final name, not the temp one
            t = tolerance
            compare(self, net, run, spec, t.check_batch_sizes, t.atol, t.rtol, what)
        return None

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
# ONNX file, INT8 quantizes the fp32 files); each registers its writers when imported.
BUILTIN_FORMATS = ("onnx", "onnx_e2e", "torchscript", "pt2", "openvino", "int8")


class FormatRegistry(MutableMapping):
    """``FORMATS``: format name -> ``WriterFactory``. The built-in formats are imported on the
    first read (they import torch, onnx, ...), not when ``lightning_cls.export`` is, so
    ``python -m lightning_cls.export --help`` stays light (tests/test_layers.py). Reads list
    the built-ins first, in ``BUILTIN_FORMATS`` order of the module that registered them (ONNX
    before OpenVINO, which converts it, the fp32 files before their INT8 models), then the
    others in registration order. Registering never imports anything: a built-in module
    registers itself while it is imported, whichever is imported first."""

    def __init__(self, builtins: Sequence[str]):
        self._writers: dict[str, WriterFactory] = {}
        self._builtins, self._loaded = tuple(builtins), False

    def _load(self) -> dict[str, WriterFactory]:
        if not self._loaded:
            for module in self._builtins:
                importlib.import_module(f"lightning_cls.export.{module}")
            rank = {f"lightning_cls.export.{m}": i for i, m in enumerate(self._builtins)}
            last = len(rank)  # plug-ins after the built-ins, in registration order (sort is stable)
            order = sorted(self._writers, key=lambda n: rank.get(_module(self._writers[n]), last))
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


def _module(factory: object) -> str:
    return getattr(factory, "__module__", "") or ""


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
    return write_checked(writer, net, spec, path, Tolerance(check_batch_sizes, atol, rtol)).path


def write_checked(
    writer: Writer,
    net: nn.Module | None,
    spec: InputSpec,
    path: str | Path,
    tolerance: Tolerance = Tolerance(),
    data: Splits | None = None,
) -> Written:
    """``write_verified`` with the check's report, and ``data`` for a writer that needs it."""
    path = Path(path)
    if writer.needs_data and data is None:
        raise ValueError(
            f"{writer.title} ({writer.file}) is calibrated or measured on the DataModule's "
            "splits, so it needs a DataModule; pass data=<name> (e.g. data=cifar10) on the "
            "command line."
        )
    extra = {"data": data} if writer.needs_data else {}
    files = [path.with_suffix(suffix) for suffix in writer.companions] + [path]
    was_training = net.training if net is not None else False
    if net is not None:
        net.eval()
    model = net
    if net is not None and writer.features and spec.decision.needs_features:
        model = with_features(net, spec.input_shape)  # (logits, features): two outputs
    try:
        with _temp_files(files) as temps:
            writer.write(model, writer.example(spec, 2), temps[-1], spec, **extra)
            run, stored = writer.read_back(temps[-1])
            if stored != writer.stored_spec(spec):
                raise ValueError(
                    f"The input spec did not survive the round trip: {stored} != "
                    f"{writer.stored_spec(spec)}."
                )
            report = writer.check(model, run, spec, temps[-1], path, data, tolerance)
    finally:
        if net is not None:
            net.train(was_training)
    log.info("Exported %s to %s", writer.title, path)
    return Written(path, report)


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
