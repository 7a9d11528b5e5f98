"""One pipeline for every export: registered ``Writer``s, each through one skeleton.

A format is a ``Writer`` class registered in ``FORMATS`` (the one ``lightning_cls.registry.Registry``;
the built-ins as lazy entries below, plug-ins through the ``lightning_cls.export_formats``
entry-point group), as a runtime is registered in ``inference.runtimes.RUNTIMES``. A writer
declares what the pipeline needs to know before anything is written: ``requires`` (the files,
by result key, it is made from: OpenVINO and INT8 name their source), ``needs_data`` (why it
needs the DataModule's splits, or ``""``), ``modules`` (the packages it and its runtime need:
``export=auto`` skips it where one is missing), ``Options`` (the dataclass of its own options:
``export.<format>.*``, from its entry in ``conf/export/<format>.yaml``; ``options_of`` builds
it from that entry alone) and ``from_options`` (the writers its options ask for).
``export_model`` orders the requested writers by ``requires`` and runs each through
``Writer.export``, by default the skeleton here, once for every format:

0. ``writer.refuses(spec)``: a format that cannot carry the model's decision (Core ML a
   feature-space rule, ``onnx_e2e`` a rejection rule or prediction sets) is refused in one line
   naming the fix, before anything is written (``export_model`` asks every writer first);
1. the network in eval mode (its mode restored in ``finally``);
2. ``writer.write`` writes under a hidden temp name in the target's folder (the suffix kept,
   so the runtime registry recognises it; companions such as OpenVINO's ``.bin`` beside it);
3. the temp file is read back through the runtime that will serve it (``writer.read_back``,
   by default ``RUNTIMES[suffix]``): it must carry the spec (else ``ValueError``) and pass
   ``writer.check``: parity with eager PyTorch at each check batch size for an fp32 file
   (``ExportCheckError``), the accuracy gate against its source for INT8
   (``export.int8.Int8Writer``: ``AccuracyDropError``);
4. only then is it renamed over the final name (``lightning_cls.fileio``); on any failure the
   temp files are removed and an earlier file at the final name is left as it was.

A step built on written files rather than on a file of its own (``triton``, ``auto``)
overrides ``export``. ``export_format(name, net, spec, path, **options)`` runs one format.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from lightning_cls.export.checks import check_outputs_close, example_batch
from lightning_cls.fileio import atomic_path, atomic_paths
from lightning_cls.inference.network import with_features
from lightning_cls.inference.runtimes import FEATURES_OUTPUT, RUNTIMES, open_runtime
from lightning_cls.inference.spec import InputSpec, Split
from lightning_cls.registry import Registry

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
    # What the pipeline checks and orders by before anything is written:
    requires: tuple[str, ...] = ()  # result keys of the files it is made from ("onnx")
    uses: str = ""  # the refusal when one is missing: "OpenVINO converts the ONNX file"
    needs_data: str = ""  # why it needs the DataModule ("" : it does not)
    modules: tuple[str, ...] = ()  # packages it and its runtime import (auto skips it without)
    extra: str = ""  # the pip extra that installs ``modules`` ("executorch")

    # Its own options: a dataclass, built from its entry of the export config alone
    # (``export.<options_entry>.*``; conf/export/<format>.yaml holds it); None: it takes none.
    Options: type | None = None
    options_entry: str = ""  # that entry's name ("": the name the format is registered under)

    @classmethod
    def from_options(cls, options: Any, config: ExportConfig) -> list[Writer]:
        """The writers this format's ``options`` (an ``Options``, or None) ask for (TorchScript:
        one per mode); by default one, built with the options' fields as its arguments.
        ``config``: the whole export (``export=auto`` builds every candidate from it)."""
        return [cls(**vars(options))] if options is not None else [cls()]

    @classmethod
    def candidates(cls, options: Any) -> dict[str, Writer]:
        """``export=auto``'s candidates of this format, by name (``{}``: not a candidate)."""
        return {}

    @classmethod
    def available(cls) -> bool:
        """Whether this machine can write and run it: its packages and its runtime are here."""
        suffix_served = not cls.file or Path(cls.file).suffix in RUNTIMES
        return suffix_served and not missing_modules(cls.modules)

    @classmethod
    def unavailable(cls) -> str:
        """Why this machine cannot write it (a package of ``modules`` is missing), in one line
        naming the extra to install ("": nothing missing)."""
        missing = missing_modules(cls.modules)
        if not missing:
            return ""
        install = f"pip install 'lightning_cls[{cls.extra}]'" if cls.extra else "install them"
        return f"{cls.title or cls.key} needs {', '.join(missing)}: {install}."

    def refuses(self, spec: InputSpec) -> str:
        """Why this format cannot carry the model ``spec`` describes, in one line naming the
        fix ("": it can); asked of every writer before any file of an export is written."""
        return ""

    def bind(self, files: Mapping[str, Path], data: ExportData | None) -> None:
        """Before ``export``: the files written so far (by result key) and the data."""

    def export(self, net: nn.Module | None, spec: InputSpec, path: Path, **check: Any) -> Path:
        """Write the file at ``path`` through the skeleton (a step overrides this)."""
        return write_verified(self, net, spec, path, **check)

    def check(self, model, run, spec: InputSpec, path: Path, batch_sizes, atol, rtol) -> str:
        """The file read back (``run``) against eager ``model``: parity at each batch size
        (``model=None``, a file converted from another verified file: the spec alone). Returns
        what was checked, for the export's log line."""
        if model is None:
            return "checked: its input spec (converted from a verified file)"
        if not batch_sizes:
            return "checked: its input spec (no batch sizes to compare at)"
        what = f"{self.title} {path.name}"  # the final name, not the temp one
        diff = compare(self, model, run, spec, batch_sizes, atol, rtol, what)
        sizes = " and ".join(str(b) for b in batch_sizes)
        return f"checked: {self.title} vs eager PyTorch at batch {sizes}, max abs diff {diff:.2g}"

    def copy_tagged(self, src: Path, dst: Path, key: str, text: str) -> Path:
        """Copy the file at ``src`` (companions too) to ``dst`` with ``text`` under ``key`` in the
        file's own metadata (``export=auto``'s winner); this default copies it untagged."""
        pairs = [(src.with_suffix(s), dst.with_suffix(s)) for s in self.companions] + [(src, dst)]
        with _temp_files([d for _, d in pairs]) as temps:
            for (source, _), tmp in zip(pairs, temps):
                shutil.copyfile(source, tmp)
        return dst

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


def missing_modules(modules: Sequence[str]) -> list[str]:
    """The packages of ``modules`` that do not import here (a module set to None counts)."""
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # ValueError: sys.modules[name] is None
            found = False
        if not found:
            missing.append(name)
    return missing


@dataclass
class ExportData:
    """What a writer with ``needs_data`` gets: the train split (calibration), the validation
    split (the accuracy gate), the baseline accuracy (None: the source file's own) and the
    DataModule they come from (``export=auto`` measures on it)."""

    train: Split
    val: Split
    reference_acc: float | None = None
    datamodule: Any = None


FORMATS = Registry("export format", "lightning_cls.export_formats", returns=Writer)
# The built-in formats, imported on first use (they import torch, onnx, ...), so
# ``python -m lightning_cls.export --help`` stays light (tests/test_layers.py). A new one is a
# line here (or ``register_format(name, WriterClass)`` where the class is defined).
for _name, _target in {
    "onnx": "onnx:OnnxWriter",
    "onnx_e2e": "onnx_e2e:OnnxE2EWriter",
    "torchscript": "torchscript:TorchScriptWriter",
    "pt2": "pt2:Pt2Writer",
    "openvino": "openvino:OpenVINOWriter",
    "onnx_int8": "int8:OnnxStaticInt8",
    "torchscript_int8_dynamic": "int8:TorchDynamicInt8",
    "openvino_int8": "int8:OpenVINOInt8",
    "litert_int8": "int8:LiteRTInt8",
    "triton": "triton:TritonStep",
    "auto": "auto:AutoStep",
    "executorch": "executorch:ExecuTorchWriter",
    "litert": "litert:LiteRTWriter",
    "coreml": "coreml:CoreMLWriter",
}.items():
    FORMATS.register(_name, f"lightning_cls.export.{_target}")


def register_format(name: str, writer: type[Writer] | str) -> None:
    """Make ``export.formats=[name]`` write ``writer`` (a ``Writer`` class, or its lazy
    ``"package.module:Class"``); a taken name is an error."""
    if isinstance(writer, str):
        FORMATS.register(name, writer)
    else:
        FORMATS.register(name)(writer)


def options_of(name: str, entries: Mapping[str, Mapping[str, Any]]) -> Any:
    """Format ``name``'s ``Options`` built from its own entry of ``entries`` (the export
    config's ``options``; a missing entry: the defaults), or None for a format without options.
    An option it does not have is a ``ValueError`` naming the ones it has."""
    builder = FORMATS.get(name)
    options_type = getattr(builder, "Options", None)
    if options_type is None:
        return None
    entry = getattr(builder, "options_entry", "") or name
    given = dict(entries.get(entry) or {})
    known = [f.name for f in dataclasses.fields(options_type)]
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ValueError(
            f"export.{entry} has no option {', '.join(unknown)} (export={name} takes "
            f"{', '.join(known)}); fix the key, e.g. export.{entry}.{known[0]}=..."
        )
    return options_type(**given)


def writers_of(name: str, config: ExportConfig) -> list[Writer]:
    """The writers ``config`` asks of format ``name``, each given its own options."""
    builder = FORMATS.get(name)
    reason = builder.unavailable() if hasattr(builder, "unavailable") else ""
    if reason:  # refused before any work: one line naming the extra
        raise ValueError(f"export={name}: {reason}")
    if not hasattr(builder, "from_options"):  # a plain builder (a factory function)
        return [builder()]
    return list(builder.from_options(options_of(name, config.options), config))


def in_order(writers: list[Writer], formats: Sequence[str]) -> list[Writer]:
    """``writers`` with each after the files it ``requires``; ``ValueError`` naming a missing one."""
    done: list[Writer] = []
    todo = list(writers)
    while todo:
        keys = {w.key for w in done}
        ready = next((w for w in todo if set(w.requires) <= keys), None)
        if ready is None:
            writer = todo[0]
            missing = next(r for r in writer.requires if r not in {w.key for w in writers})
            raise ValueError(
                f"{writer.uses or writer.title}, but '{missing}' is not in export.formats="
                f"{list(formats)}; add it (e.g. export={missing})."
            )
        done.append(ready)
        todo.remove(ready)
    return done


def export_format(
    name: str,
    net: nn.Module | None,
    spec: InputSpec,
    path: str | Path,
    check_batch_sizes: Sequence[int] = CHECK_BATCH_SIZES,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    files: Mapping[str, Path] | None = None,
    data: ExportData | None = None,
    **options: Any,
) -> Path:
    """Write format ``name`` (``FORMATS``) of ``net`` at ``path`` through its check; return
    ``path``. ``options`` go to the writer (``mode="script"``, ``opset=17``,
    ``onnx_path=...``); ``files`` are its sources by result key; ``data`` for INT8."""
    writer = FORMATS.create(name, **options)
    writer.bind(files or {}, data)
    kw = {"check_batch_sizes": check_batch_sizes, "atol": atol, "rtol": rtol}
    return writer.export(net, spec, Path(path), **kw)


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

    With ``net=None`` (a file converted from another verified file) only the spec is checked
    (and whatever ``writer.check`` checks without a network: INT8's accuracy gate).
    """
    path = Path(path)
    reason = writer.refuses(spec)
    if reason:  # export_format alone: export_model asked every writer before writing anything
        raise ValueError(f"export={writer.key}: {reason}")
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
            checked = writer.check(model, run, spec, path, check_batch_sizes, atol, rtol)
    finally:
        if net is not None:
            net.train(was_training)
    log.info("Exported %s to %s%s", writer.title, path, f" ({checked})" if checked else "")
    return path


def compare(writer, net, run, spec, batch_sizes, atol, rtol, what) -> float:
    """``run`` (the file read back) must match eager ``net`` at each batch size (a
    ``FeatureNet``: its logits, and its features against the runtime's ``outputs``); returns
    the largest absolute difference of the logits."""
    worst = 0.0
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
        diff = check_outputs_close(expected, actual, atol, rtol, f"{what} at batch {batch_size}")
        worst = max(worst, diff)
    return worst


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
