"""Export-side helpers around the input spec: example batches and round-trip checks.

The spec itself (``InputSpec``, formerly ``InputSpec``) lives in ``lightning_cls.inference.spec``;
each artifact carries the same keys: ONNX as ``metadata_props`` (one JSON-encoded value per
key, readable from any language), TorchScript and ``.pt2`` as an extra file ``meta.json``,
checkpoints as Lightning ``hparams``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from lightning_cls.inference.spec import META_FILE, InputSpec

# The spec's former name, kept so code written against lightning_cls.export keeps working.
ModelMeta = InputSpec

__all__ = [
    "META_FILE",
    "ExportCheckError",
    "InputSpec",
    "ModelMeta",
    "check_outputs_close",
    "check_round_trip",
    "example_batch",
]


def example_batch(meta: InputSpec, batch_size: int, seed: int = 0) -> torch.Tensor:
    """A normalized float batch of random images (B, C, H, W) shaped like the model's input."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (batch_size, *meta.input_shape), generator=g, dtype=torch.uint8)
    return meta.preprocess(images)


def check_outputs_close(
    expected: torch.Tensor, actual: torch.Tensor, atol: float, rtol: float, what: str
) -> None:
    """Raise ``ExportCheckError`` naming the worst difference if the outputs disagree."""
    if expected.shape != actual.shape:
        raise ExportCheckError(
            f"{what}: output shape {tuple(actual.shape)} != eager {tuple(expected.shape)}."
        )
    if not torch.allclose(actual, expected, atol=atol, rtol=rtol):
        diff = (actual - expected).abs().max().item()
        raise ExportCheckError(
            f"{what}: outputs differ from eager PyTorch by up to {diff:.3g} "
            f"(atol={atol}, rtol={rtol}). The exported file does not compute what the model does."
        )


def check_round_trip(
    net: nn.Module,
    loaded: Callable[[torch.Tensor], torch.Tensor],
    meta: InputSpec,
    loaded_meta: InputSpec,
    check_batch_sizes: Sequence[int],
    atol: float,
    rtol: float,
    what: str,
) -> None:
    """A reloaded artifact must carry ``meta`` and match eager ``net`` at each batch size."""
    if loaded_meta != meta:
        raise ValueError(f"Metadata did not survive the round trip: {loaded_meta} != {meta}.")
    for seed, batch_size in enumerate(check_batch_sizes):
        x = example_batch(meta, batch_size, seed=seed)
        with torch.no_grad():
            expected, actual = net(x), loaded(x)
        check_outputs_close(expected, actual, atol, rtol, f"{what} at batch {batch_size}")


class ExportCheckError(RuntimeError):
    """An exported artifact, reloaded, does not reproduce the eager model's outputs."""
