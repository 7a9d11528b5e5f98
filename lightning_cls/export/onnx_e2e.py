"""``export=onnx_e2e``: one ONNX file that takes raw pixels and returns probabilities.

Any ONNX server (Triton, KServe, ONNX Runtime in another language) can run it without our
Python: the graph takes uint8 NHWC images ``(batch, image_size, image_size, channels)`` (what
an image decoder produces, resized by the client to ``image_size``), and does the /255,
mean/std normalisation, the NHWC -> NCHW transpose, the artifact's test-time augmentation
(``spec.tta``: flip/translate, only for the images below its ``threshold`` when the model
has one) and the task's probabilities itself (``spec.decision``: the softmax after the
calibrated temperature; a sigmoid per label, each after its own temperature, for a multi-label
model, whose threshold travels in the metadata). There is no resize in the graph: resizing
photos stays with the client (``lightning_cls.inference.decode_image`` does it as in
training).

Probabilities are all the file answers. A model calibrated with a rejection rule (``reject=``:
its ``unknown`` verdict) or prediction sets (``conformal``) is refused in one line before any
file is written (``OnnxE2EWriter.refuses``): a server running the file without lightning_cls
would answer without the rule. ``export=onnx`` carries them (predict and serve apply them).

The file carries the ``InputSpec`` in ``metadata_props`` like ``model.onnx``, with
``layout="NHWC"`` and ``preprocessing`` saying that the graph does it, so a reader never
normalizes twice. The export skeleton (``export.writer``) checks it like every other format:
read back in ONNX Runtime (a plain session: ``OnnxRuntime`` serves NCHW float models) and
compared with eager PyTorch (preprocess + network + TTA + softmax, i.e.
``Predictor.predict_images``) at each check batch size, under a temp name that becomes the final
name only if the check holds.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from lightning_cls.export.onnx import OPSET, OnnxOptions, read_metadata, write_onnx
from lightning_cls.export.writer import Writer
from lightning_cls.inference.predictor import Predictor, tta
from lightning_cls.inference.rules.msp import MSP
from lightning_cls.inference.runtimes import make_session
from lightning_cls.inference.spec import InputSpec, normalize_constants

INPUT_NAME = "images"
OUTPUT_NAME = "probabilities"
LAYOUT = "NHWC"
PREPROCESSING = (
    "inside the graph: uint8 NHWC pixels (batch, image_size, image_size, channels), already "
    "resized to image_size, in; (x / 255 - mean) / std, NCHW, TTA and softmax (multilabel: "
    "sigmoid) done by the model"
)
FILE = "model_e2e.onnx"


class EndToEnd(nn.Module):
    """uint8 (B, H, W, C) -> probabilities (B, classes): normalisation, TTA and the task's
    probabilities (temperature included) around ``net``, with the same constants, the same
    TTA function and the same decision object (``spec.decision``) as ``Predictor``."""

    def __init__(self, net: nn.Module, spec: InputSpec):
        super().__init__()
        self.net = net
        self.flip, self.translate = spec.tta.flip, spec.tta.translate
        self.tta_threshold = spec.tta.threshold if spec.tta.active else None
        self.task = spec.decision  # probabilities after the model's temperature(s)
        scale, shift = normalize_constants(spec.mean, spec.std, spec.num_channels)
        self.register_buffer("scale", scale.view(1, 1, 1, -1).clone())  # (1, 1, 1, C)
        self.register_buffer("shift", shift.view(1, 1, 1, -1).clone())

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.float() * self.scale - self.shift  # (B, H, W, C), = spec.preprocess
        x = x.permute(0, 3, 1, 2)  # (B, C, H, W)
        logits = tta(self.net, x, self.flip, self.translate)  # (B, K)
        if self.tta_threshold is not None:
            # Selective TTA (``predictor.selective_tta``) without data-dependent control flow:
            # the TTA logits where the plain pass is unsure, the plain ones elsewhere.
            plain = self.net(x)  # (B, K)
            unsure = self.task.confidence(plain, MSP) < self.tta_threshold  # (B,)
            logits = torch.where(unsure[:, None], logits, plain)
        return self.task.probabilities(logits)  # (B, K)


def e2e_spec(spec: InputSpec) -> InputSpec:
    """The spec an end-to-end file carries: ``spec`` with the NHWC layout and in-graph
    preprocessing recorded."""
    return dataclasses.replace(spec, layout=LAYOUT, preprocessing=PREPROCESSING)


def example_images(spec: InputSpec, batch_size: int, seed: int = 0) -> torch.Tensor:
    """Random uint8 images (B, H, W, C), the end-to-end model's input."""
    g = torch.Generator().manual_seed(seed)
    shape = (batch_size, spec.image_size, spec.image_size, spec.num_channels)
    return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)


class OnnxE2EWriter(Writer):
    """``model_e2e.onnx``: ``EndToEnd(net)`` in ONNX; uint8 NHWC in, probabilities out."""

    key, file, title = "onnx_e2e", FILE, "ONNX"
    modules = ("onnx", "onnxruntime")
    Options, options_entry = OnnxOptions, "onnx"  # an ONNX file: export.onnx.opset

    def __init__(self, opset: int = OPSET):
        self.opset = opset

    def refuses(self, spec):
        decided = (
            [f"reject={spec.decision.reject['score']}"] if spec.decision.reject is not None else []
        )
        decided += (
            [f"conformal={spec.decision.conformal['method']}"]
            if spec.decision.conformal is not None
            else []
        )
        if not decided:
            return ""
        return (
            f"the model is calibrated with {' and '.join(decided)}, which the end-to-end file "
            "does not carry (it answers probabilities only: a server running it would answer "
            "without the rule); use export=onnx, which predict and serve run with the rule, or "
            "export a checkpoint calibrated without it."
        )

    def write(self, net, example, tmp, spec):
        module = EndToEnd(net, spec).eval()
        write_onnx(module, example, tmp, e2e_spec(spec), self.opset, INPUT_NAME, OUTPUT_NAME)

    def example(self, spec, batch_size, seed=0):
        return example_images(spec, batch_size, seed)  # (B, H, W, C) uint8

    features = False  # probabilities out: a feature-space rule runs on model.onnx, not here

    def expected(self, net, spec, images):
        return Predictor(net, spec).predict_images(images.permute(0, 3, 1, 2).contiguous())

    def stored_spec(self, spec):
        return e2e_spec(spec)

    def read_back(self, path):
        session = make_session(path)

        def run(images: torch.Tensor) -> torch.Tensor:
            (probs,) = session.run(None, {INPUT_NAME: images.numpy()})
            return torch.from_numpy(probs)

        return run, read_metadata(path)
