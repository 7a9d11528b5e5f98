"""What the export skeleton (``export.writer.write_verified``) checks a file with: example
batches and the output comparison with eager PyTorch.

The spec itself (``InputSpec``) lives in ``lightning_cls.inference.spec``;
each artifact carries the same keys: ONNX as ``metadata_props`` (one JSON-encoded value per
key, readable from any language), TorchScript and ``.pt2`` as an extra file ``meta.json``,
OpenVINO in its ``rt_info``, checkpoints as Lightning ``hparams``.
"""

from __future__ import annotations

import torch

from lightning_cls.export.errors import ExportCheckError
from lightning_cls.inference.spec import InputSpec


def example_batch(spec: InputSpec, batch_size: int, seed: int = 0) -> torch.Tensor:
    """A normalized float batch of random images (B, C, H, W) shaped like the model's input."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (batch_size, *spec.input_shape), generator=g, dtype=torch.uint8)
    return spec.preprocess(images)


def check_outputs_close(
    expected: torch.Tensor, actual: torch.Tensor, atol: float, rtol: float, what: str
) -> float:
    """Raise ``ExportCheckError`` naming the worst difference if the outputs disagree; else
    return the largest absolute difference (what the export's log line reports)."""
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
    return float((actual.float() - expected.float()).abs().max()) if expected.numel() else 0.0
