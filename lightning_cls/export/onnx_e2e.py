"""``export=onnx_e2e``: one ONNX file that takes raw pixels and returns probabilities.

Any ONNX server (Triton, KServe, ONNX Runtime in another language) can run it without our
Python: the graph takes uint8 NHWC images ``(batch, image_size, image_size, channels)`` (what
an image decoder produces, resized by the client to ``image_size``), and does the /255,
mean/std normalisation, the NHWC -> NCHW transpose, the artifact's test-time augmentation
(``tta_flip``/``tta_translate``) and the softmax itself (a sigmoid per label for a
multi-label model, whose threshold travels in the metadata). There is no resize in the graph:
resizing photos stays with the client (``lightning_cls.inference.decode_image`` does it as in
training).

The file carries the ``InputSpec`` in ``metadata_props`` like ``model.onnx``, with
``layout="NHWC"`` and ``preprocessing`` saying that the graph does it, so a reader never
normalizes twice. It is checked like every other writer: reloaded in ONNX Runtime and compared
with eager PyTorch (preprocess + network + TTA + softmax, i.e. ``Predictor.predict_images``) at
each check batch size, under a temp name that becomes the final name only if the check holds.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from lightning_cls.export.checks import check_outputs_close
from lightning_cls.export.onnx import OPSET, PARITY_BATCH_SIZES, read_metadata, write_onnx
from lightning_cls.fileio import atomic_path
from lightning_cls.inference.predictor import Predictor, probabilities, tta
from lightning_cls.inference.runtimes import make_session
from lightning_cls.inference.spec import InputSpec, normalize_constants

log = logging.getLogger(__name__)

INPUT_NAME = "images"
OUTPUT_NAME = "probabilities"
LAYOUT = "NHWC"
PREPROCESSING = (
    "inside the graph: uint8 NHWC pixels (batch, image_size, image_size, channels), already "
    "resized to image_size, in; (x / 255 - mean) / std, NCHW, TTA and softmax (multilabel: "
    "sigmoid) done by the model"
)


class EndToEnd(nn.Module):
    """uint8 (B, H, W, C) -> probabilities (B, classes): normalisation, TTA and softmax around
    ``net``, with the same constants and the same TTA function as ``Predictor``."""

    def __init__(self, net: nn.Module, spec: InputSpec):
        super().__init__()
        self.net = net
        self.flip, self.translate = spec.tta_flip, spec.tta_translate
        self.multilabel = spec.multilabel
        scale, shift = normalize_constants(spec.mean, spec.std, spec.num_channels)
        self.register_buffer("scale", scale.view(1, 1, 1, -1).clone())  # (1, 1, 1, C)
        self.register_buffer("shift", shift.view(1, 1, 1, -1).clone())

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.float() * self.scale - self.shift  # (B, H, W, C), = spec.preprocess
        x = x.permute(0, 3, 1, 2)  # (B, C, H, W)
        logits = tta(self.net, x, self.flip, self.translate)
        return probabilities(logits, self.multilabel)  # (B, K)


def e2e_spec(spec: InputSpec) -> InputSpec:
    """The spec an end-to-end file carries: ``spec`` with the NHWC layout and in-graph
    preprocessing recorded."""
    return dataclasses.replace(spec, layout=LAYOUT, preprocessing=PREPROCESSING)


def example_images(spec: InputSpec, batch_size: int, seed: int = 0) -> torch.Tensor:
    """Random uint8 images (B, H, W, C), the end-to-end model's input."""
    g = torch.Generator().manual_seed(seed)
    shape = (batch_size, spec.image_size, spec.image_size, spec.num_channels)
    return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)


def export_onnx_e2e(
    net: nn.Module,
    spec: InputSpec,
    path: str | Path,
    opset: int = OPSET,
    check_batch_sizes: Sequence[int] = PARITY_BATCH_SIZES,
    atol: float = 1e-4,
    rtol: float = 1e-3,
) -> Path:
    """Export ``net`` (eval mode) wrapped in ``EndToEnd`` to one self-contained ``.onnx`` file
    with a dynamic batch axis, and verify it in ONNX Runtime against eager PyTorch."""

    path = Path(path)
    was_training = net.training
    net.eval()
    try:
        with atomic_path(path) as tmp:
            write_onnx(
                EndToEnd(net, spec).eval(),
                example_images(spec, 2),
                tmp,
                e2e_spec(spec),
                opset,
                INPUT_NAME,
                OUTPUT_NAME,
            )
            check_e2e_parity(tmp, net, spec, check_batch_sizes, atol, rtol, path.name)
    finally:
        net.train(was_training)
    log.info("Exported end-to-end ONNX (uint8 NHWC in, probabilities out) to %s", path)
    return path


def check_e2e_parity(
    path: str | Path,
    net: nn.Module,
    spec: InputSpec,
    batch_sizes: Sequence[int] = PARITY_BATCH_SIZES,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    name: str | None = None,
) -> None:
    """The file must carry ``e2e_spec(spec)`` and give eager ``Predictor(net, spec)``'s
    probabilities at each batch size; ``ExportCheckError``/``ValueError`` otherwise."""
    path = Path(path)
    name = name or path.name
    stored = read_metadata(path)
    if stored != e2e_spec(spec):
        raise ValueError(f"The input spec did not survive the round trip: {stored} != {spec}.")
    session = make_session(path)
    eager = Predictor(net, spec)
    for seed, batch_size in enumerate(batch_sizes):
        images = example_images(spec, batch_size, seed=seed)  # (B, H, W, C)
        expected = eager.predict_images(images.permute(0, 3, 1, 2).contiguous())
        (probs,) = session.run(None, {INPUT_NAME: images.numpy()})
        actual = torch.from_numpy(probs)
        check_outputs_close(expected, actual, atol, rtol, f"ONNX {name} at batch {batch_size}")
    log.info("End-to-end ONNX parity with eager PyTorch holds at batch sizes %s", list(batch_sizes))
