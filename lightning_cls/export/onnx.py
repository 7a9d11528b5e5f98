"""ONNX export with the dynamo exporter, preprocessing metadata, and an ORT parity check.

The file is self-contained (no external-data side file), has a dynamic batch axis named
``batch``, a pinned opset, and carries ``InputSpec`` in its ``metadata_props``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from lightning_cls.export.checks import check_outputs_close, example_batch
from lightning_cls.export.errors import ExportCheckError
from lightning_cls.fileio import atomic_path
from lightning_cls.inference.runtimes import make_session
from lightning_cls.inference.spec import InputSpec

log = logging.getLogger(__name__)

OPSET = 18
INPUT_NAME = "input"
OUTPUT_NAME = "logits"
PARITY_BATCH_SIZES = (1, 7)


def export_onnx(
    net: nn.Module,
    spec: InputSpec,
    path: str | Path,
    opset: int = OPSET,
    check_batch_sizes: Sequence[int] = PARITY_BATCH_SIZES,
    atol: float = 1e-4,
    rtol: float = 1e-3,
) -> Path:
    """Export ``net`` (in eval mode) to one ``.onnx`` file and verify it in ONNX Runtime.

    The file is written and checked under a temp name and only then renamed to ``path``, so
    a failed check leaves an earlier export at ``path`` untouched.
    """

    path = Path(path)
    was_training = net.training
    net.eval()
    try:
        with atomic_path(path) as tmp:
            write_onnx(net, example_batch(spec, 2), tmp, spec, opset, INPUT_NAME, OUTPUT_NAME)
            if check_batch_sizes:
                check_onnx_parity(tmp, net, spec, check_batch_sizes, atol, rtol, path.name)
    finally:
        net.train(was_training)
    log.info("Exported ONNX (opset %d) to %s", opset, path)
    return path


def write_onnx(
    module: nn.Module,
    example: torch.Tensor,
    tmp: Path,
    spec: InputSpec,
    opset: int,
    input_name: str,
    output_name: str,
) -> None:
    """``module`` as one self-contained ONNX file at ``tmp`` (dynamo exporter, dynamic batch
    axis, ``spec`` in ``metadata_props``), checked by ``onnx.checker``. Shared by ``export=onnx``
    and ``export=onnx_e2e``; the callers verify outputs and rename ``tmp`` into place."""
    import onnx

    batch = torch.export.Dim("batch", min=1)
    torch.onnx.export(
        module,
        (example,),
        str(tmp),
        dynamo=True,
        dynamic_shapes=({0: batch},),
        opset_version=opset,
        input_names=[input_name],
        output_names=[output_name],
        external_data=False,
        verbose=False,
    )
    model = onnx.load(str(tmp))
    write_metadata(model, spec)
    onnx.save_model(model, str(tmp), save_as_external_data=False)
    onnx.checker.check_model(str(tmp))
    side_files = list(tmp.parent.glob(tmp.name + ".*"))
    if side_files:
        for side_file in side_files:
            side_file.unlink()
        raise ExportCheckError(
            f"ONNX export wrote side files {[p.name for p in side_files]}; expected one "
            "self-contained file."
        )


def write_metadata(model, spec: InputSpec, **extra: str) -> None:
    """Replace the model's ``metadata_props`` with ``spec`` (+ ``extra`` string entries)."""
    del model.metadata_props[:]
    for key, value in {**spec.to_props(), **extra}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value


def read_metadata(path: str | Path) -> InputSpec:
    """The ``InputSpec`` stored in an ``.onnx`` file's ``metadata_props``."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    props = {p.key: p.value for p in model.metadata_props}
    return InputSpec.from_props(props, f"{Path(path).name} (metadata_props)")


def run_session(session, x: torch.Tensor) -> torch.Tensor:
    """Run an ORT session on a float batch (B, C, H, W) -> logits (B, classes)."""
    name = session.get_inputs()[0].name
    (logits,) = session.run(None, {name: x.detach().cpu().contiguous().numpy()})
    return torch.from_numpy(logits)


def check_onnx_parity(
    path: str | Path,
    net: nn.Module,
    spec: InputSpec,
    batch_sizes: Sequence[int] = PARITY_BATCH_SIZES,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    name: str | None = None,
) -> None:
    """Run the file in ONNX Runtime at each batch size; raise ``ExportCheckError`` on mismatch.

    ``net`` must be in eval mode (dropout and batch-norm statistics as exported). ``name`` is
    the file name the message uses (export_onnx passes the final name, not the temp one).
    """
    path = Path(path)
    name = name or path.name
    session = make_session(path)
    for seed, batch_size in enumerate(batch_sizes):
        x = example_batch(spec, batch_size, seed=seed)
        with torch.no_grad():
            expected = net(x)
        check_outputs_close(
            expected, run_session(session, x), atol, rtol, f"ONNX {name} at batch {batch_size}"
        )
    log.info("ONNX parity with eager PyTorch holds at batch sizes %s", list(batch_sizes))
