"""Checks on what an artifact brings: its file (corrupt? one line naming it) and its spec
against the model's declared shapes and outputs (a wrong field: one line naming it and the fix).
"""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from lightning_cls.inference.spec import InputSpec, SpecError, override_hint


@contextmanager
def unreadable_as(path: Path, what: str) -> Iterator[None]:
    """Turn a loader's failure on a corrupt, truncated or foreign file into one line naming it."""
    try:
        yield
    except Exception as err:  # each loader raises its own types (protobuf, zip, C++ errors)
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ValueError(
            f"Cannot read {path} as {what} ({type(err).__name__}: {first}); the file is corrupt, "
            "truncated or of another kind: export it again or check the path."
        ) from err


@contextmanager
def quiet_logger(name: str) -> Iterator[None]:
    """Silence one library logger for a block (torch.export logs a traceback it then handles)."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def check_declared_shapes(
    path: Path, spec: InputSpec, input_dims: Sequence, output_dims: Sequence
) -> None:
    """Compare the spec with the shapes a file declares (ONNX, OpenVINO): fixed input
    channels/height/width and a fixed number of outputs must match it. Symbolic or dynamic
    dimensions (``batch``, -1, None) accept anything."""
    if spec.layout != "NCHW":  # export=onnx_e2e: uint8 NHWC in, probabilities out
        raise ValueError(
            f"{path} is an end-to-end model ({spec.layout} uint8 images in, probabilities out) "
            "for servers that run ONNX without lightning_cls (Triton, KServe, onnxruntime); "
            "predict and serve load the model.onnx exported beside it."
        )
    dims = [d if isinstance(d, int) and d > 0 else None for d in input_dims]
    if len(dims) == 4:
        channels, height, width = dims[1:]
        if channels is not None and channels != spec.num_channels:
            raise SpecError(
                "num_channels",
                f"{path.name} takes {channels}-channel images but its spec says num_channels="
                f"{spec.num_channels}. {override_hint('num_channels')}",
            )
        if any(size is not None and size != spec.image_size for size in (height, width)):
            raise SpecError(
                "image_size",
                f"{path.name} takes {height}x{width} images but its spec says image_size="
                f"{spec.image_size}. {override_hint('image_size')}",
            )
    if output_dims and isinstance(output_dims[-1], int) and output_dims[-1] > 0:
        check_num_outputs(path, spec, output_dims[-1])


def check_num_outputs(path: Path, spec: InputSpec, outputs: int) -> None:
    """One class name per model output, no more, no fewer."""
    if outputs != spec.num_classes:
        shown = ", ".join(spec.classes[:5]) + (", ..." if spec.num_classes > 5 else "")
        raise SpecError(
            "classes",
            f"{path.name} outputs {outputs} logits per image but its spec names "
            f"{spec.num_classes} classes ({shown}); give one name per output: +spec.classes=[...] "
            f"with {outputs} names (Python: spec={{'classes': [...]}}).",
        )


class UntrustedArtifactError(ValueError):
    """A file that can run code when loaded (``.pt2``, TorchScript) was not marked trusted."""


def refuse_untrusted(path: str | Path, kind: str, trust_artifact: bool) -> None:
    """Raise ``UntrustedArtifactError`` for a ``kind`` file that can run code, unless trusted
    (``True`` itself: ``"false"``, ``"no"`` or 1 is refused, saying so; ``flags.py``)."""
    from lightning_cls.inference.flags import check_trust_flag  # the one rule for trust flags

    refusal = (
        f"Refusing to load {path}: a {kind} file can run arbitrary code when it is loaded, "
        "so only load one from a source you trust. If you do, pass trust_artifact=true "
        "(Python: trust_artifact=True); otherwise use an ONNX export (export=onnx), which "
        "is data only."
    )
    try:
        trusted = check_trust_flag("trust_artifact", trust_artifact)
    except TypeError as err:  # not a boolean: no trust, and the reason first
        raise UntrustedArtifactError(f"{err} {refusal}") from None
    if not trusted:
        raise UntrustedArtifactError(refusal)


def holds_torchscript(path: Path) -> bool:
    """Whether ``path`` is a TorchScript archive (a zip with compiled ``code/`` inside)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any("/code/" in name for name in archive.namelist())
