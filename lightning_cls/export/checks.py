"""Export-side checks: example batches and the round trip every writer runs on its file.

The spec itself (``InputSpec``) lives in ``lightning_cls.inference.spec``;
each artifact carries the same keys: ONNX as ``metadata_props`` (one JSON-encoded value per
key, readable from any language), TorchScript and ``.pt2`` as an extra file ``meta.json``,
checkpoints as Lightning ``hparams``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from lightning_cls.export.errors import ExportCheckError
from lightning_cls.inference.spec import InputSpec


def example_batch(spec: InputSpec, batch_size: int, seed: int = 0) -> torch.Tensor:
    """A normalized float batch of random images (B, C, H, W) shaped like the model's input."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (batch_size, *spec.input_shape), generator=g, dtype=torch.uint8)
    return spec.preprocess(images)


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
    spec: InputSpec,
    loaded_spec: InputSpec,
    check_batch_sizes: Sequence[int],
    atol: float,
    rtol: float,
    what: str,
) -> None:
    """A reloaded artifact must carry ``spec`` and match eager ``net`` at each batch size."""
    if loaded_spec != spec:
        raise ValueError(f"The input spec did not survive the round trip: {loaded_spec} != {spec}.")
    for seed, batch_size in enumerate(check_batch_sizes):
        x = example_batch(spec, batch_size, seed=seed)
        with torch.no_grad():
            expected, actual = net(x), loaded(x)
        check_outputs_close(expected, actual, atol, rtol, f"{what} at batch {batch_size}")
