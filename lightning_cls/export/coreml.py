"""Core ML export (``export=coreml``): an ``.mlpackage`` (ML program, fp32) that takes an image.

``coremltools`` converts the ``torch.export`` program of the network wrapped with the rest of
the recipe, so an app hands Core ML a camera frame and gets class labels back:

- the input is an ``ImageType`` (RGB, or grayscale for one channel) whose ``scale``/``bias``
  are the spec's preprocessing, ``pixel / 255 - mean`` per channel; Core ML's one ``scale``
  cannot hold a per-channel ``1 / std``, so that divide is the first op of the program;
- the output is the task's probabilities after the temperature (``spec.decision``): a
  multi-class model is a Core ML classifier (``classLabel`` and ``classLabel_probs`` over the
  spec's class names), a multi-label model answers its per-class ``probabilities``;
- the spec travels in the model's ``user_defined_metadata`` (one JSON value per key, as ONNX's
  ``metadata_props``).

Predicting needs macOS (coremltools runs models only there), so the file is checked on Linux
by its spec, not its outputs: ``read_coreml`` reads the input, outputs, class labels,
preprocessing constants and metadata back, and ``CoreMLWriter.check`` compares them with what
was asked. The ``.mlpackage`` is a folder, so this writer runs its own step (``export``)
through ``fileio.atomic_dir`` instead of the one-file skeleton.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from lightning_cls.export.errors import ExportCheckError
from lightning_cls.export.writer import Writer
from lightning_cls.fileio import atomic_dir
from lightning_cls.inference.spec import InputSpec, props_to_dict
from lightning_cls.inference.trust import rule_of

log = logging.getLogger(__name__)

INPUT_NAME = "image"


class _Recipe(nn.Module):
    """``net`` between Core ML's image preprocessing and the task's probabilities."""

    def __init__(self, net: nn.Module, spec: InputSpec):
        super().__init__()
        self.net, self.task = net, spec.decision
        self.register_buffer("inv_std", 1 / torch.tensor(spec.std).view(1, -1, 1, 1))

    def forward(self, x):  # (B, C, H, W): pixel / 255 - mean, from the ImageType
        return self.task.probabilities(self.net(x * self.inv_std))  # (B, K)


@dataclass
class CoreMLSummary:
    """What a ``.mlpackage`` declares, read without running it (any OS)."""

    input_name: str
    color_space: str  # "RGB" or "GRAYSCALE"
    size: tuple[int, int]  # (height, width)
    outputs: list[str]
    classes: list[str]  # the classifier's labels ([] for a multi-label model)
    scale: float
    bias: list[float]
    spec: InputSpec


def read_coreml(path: Path) -> CoreMLSummary:
    """The spec of the ``.mlpackage`` at ``path``: its input, outputs, labels, preprocessing."""
    import coremltools as ct

    proto = ct.models.MLModel(str(path), skip_model_load=True).get_spec()
    image = proto.description.input[0]
    function = proto.mlProgram.functions["main"]
    ops = function.block_specializations[function.opset].operations
    consts = {op.outputs[0].name: op.attributes["val"] for op in ops if op.type == "const"}
    classes: list[str] = []
    for op in ops:
        if op.type == "classify":
            values = op.inputs["classes"].arguments[0].value.immediateValue.list.values
            classes = [v.immediateValue.tensor.strings.values[0] for v in values]
    scale = consts[f"{INPUT_NAME}__scaled___y_0"].immediateValue.tensor.floats.values[0]
    bias = list(consts[f"{INPUT_NAME}__biased___y_0"].immediateValue.tensor.floats.values)
    metadata = dict(proto.description.metadata.userDefined)
    return CoreMLSummary(
        input_name=image.name,
        color_space=ct.proto.FeatureTypes_pb2.ImageFeatureType.ColorSpace.Name(
            image.type.imageType.colorSpace
        ),
        size=(image.type.imageType.height, image.type.imageType.width),
        outputs=[o.name for o in proto.description.output],
        classes=classes,
        scale=scale,
        bias=bias,
        spec=InputSpec.from_dict(props_to_dict(metadata, f"{path.name} (user_defined_metadata)")),
    )


class CoreMLWriter(Writer):
    """``model.mlpackage``: an image in, labels and probabilities out; checked by its spec."""

    key, file, title = "coreml", "model.mlpackage", "Core ML"
    modules = ("coremltools",)
    extra = "coreml"
    features = False  # a classifier answers labels; a feature-space rule is not in it

    def refuses(self, spec):
        rule = None if spec.decision.reject is None else rule_of(spec.decision.reject["score"])
        if rule is not None and rule.scores_logits and not rule.needs_features:
            return (
                f"reject={rule.name} scores the logits, which a Core ML classifier does not give "
                "back (it answers probabilities: every image would get the same energy or a "
                "score on another scale than its threshold's); calibrate with reject=msp for "
                "Core ML, or use export=onnx|executorch|litert."
            )
        if not spec.decision.needs_features:
            return ""
        return (
            f"reject={spec.decision.reject['score']} scores the network's features, which export=coreml "
            "does not carry (a Core ML classifier answers labels and probabilities: the file "
            "would answer without the rule); calibrate with reject=msp or reject=energy for "
            "Core ML, or use export=onnx|executorch|litert, which carry the features."
        )

    def export(self, net, spec, path, **check):
        reason = self.refuses(spec)
        if reason:  # export_format alone; export_model asked before writing anything
            raise ValueError(f"export={self.key}: {reason}")
        was_training = net.training
        net.eval()
        try:
            with atomic_dir(path) as tmp:
                self.write(net, self.example(spec, 1), tmp, spec)
                self.check_spec(read_coreml(tmp), spec, path)
        finally:
            net.train(was_training)
        log.info("Exported %s to %s", self.title, path)
        return path

    def write(self, net, example, tmp, spec):
        import coremltools as ct

        recipe = _Recipe(net, spec).eval()
        program = torch.export.export(recipe, (example,)).run_decompositions({})
        gray = spec.num_channels == 1
        image = ct.ImageType(
            name=INPUT_NAME,
            shape=tuple(example.shape),
            scale=1 / 255,
            bias=[-m for m in spec.mean] if not gray else -spec.mean[0],
            color_layout=ct.colorlayout.GRAYSCALE if gray else ct.colorlayout.RGB,
        )
        multi_label = not spec.decision.labels.exclusive
        model = ct.convert(
            program,
            inputs=[image],
            outputs=[ct.TensorType(name="probabilities")] if multi_label else None,
            classifier_config=None if multi_label else ct.ClassifierConfig(list(spec.classes)),
            convert_to="mlprogram",
            compute_precision=ct.precision.FLOAT32,  # the default fp16 would round every logit
            minimum_deployment_target=ct.target.macOS13,
        )
        model.user_defined_metadata.update(spec.to_props())
        model.save(str(tmp))

    def check_spec(self, found: CoreMLSummary, spec: InputSpec, path: Path) -> None:
        """``ExportCheckError`` naming the first thing the file declares otherwise than asked."""
        expected = {
            "input": (INPUT_NAME, "GRAYSCALE" if spec.num_channels == 1 else "RGB"),
            "size": (spec.image_size, spec.image_size),
            "class labels": list(spec.classes) if spec.decision.labels.exclusive else [],
            "preprocessing scale": round(1 / 255, 6),
            "preprocessing bias": [round(-m, 6) for m in spec.mean],
            "metadata": spec,
        }
        actual = {
            "input": (found.input_name, found.color_space),
            "size": found.size,
            "class labels": found.classes,
            "preprocessing scale": round(found.scale, 6),
            "preprocessing bias": [round(b, 6) for b in found.bias],
            "metadata": found.spec,
        }
        for what, value in expected.items():
            if actual[what] != value:
                raise ExportCheckError(
                    f"Core ML {path.name} declares {what} {actual[what]!r}, not {value!r}."
                )
