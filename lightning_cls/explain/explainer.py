"""``Explainer``: heat maps of a PyTorch network for uint8 images, as its task predicts them.

Each image is explained for the class it is predicted as (multi-class: the top class;
multi-label: every label the task predicts, one map each, and the most probable label when
none reaches the threshold), or for a class given by name or index. The images are
preprocessed as the spec says (its mean/std); test-time augmentation is not applied: a map
is read from one pass over the image as given.

Only the PyTorch artifacts (``.ckpt``, ``model_weights.pt``) have the network whose feature
maps are read; an exported graph (ONNX, OpenVINO, TorchScript, .pt2) outputs logits only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from lightning_cls.explain import TORCH_KINDS, methods, unsupported_reason
from lightning_cls.explain.layers import default_layer, feature_map_layers, resolve_layer
from lightning_cls.inference.spec import InputSpec


@dataclass
class Explanation:
    """Heat maps of a batch: one per (image, explained class) pair."""

    maps: torch.Tensor  # (M, H, W) float32 in [0, 1], at the input size
    image: list[int]  # (M,) which image of the batch each map explains
    label: list[int]  # (M,) which class
    probs: torch.Tensor  # (N, K) the task's probabilities of the N images

    def first_per_image(self) -> torch.Tensor:
        """(N, H, W): each image's first map (its top predicted class)."""
        first = {}
        for m, i in enumerate(self.image):
            first.setdefault(i, m)
        return self.maps[[first[i] for i in range(len(self.probs))]]


class Explainer:
    """Grad-CAM (``method="gradcam"``) or CAM (``"cam"``) of ``net`` at ``layer`` (a module
    name; ``None``: the default of ``explain.layers.default_layer``)."""

    def __init__(
        self,
        net: nn.Module,
        spec: InputSpec,
        method: str = "gradcam",
        layer: str | None = None,
    ):
        if method not in methods.METHODS:
            raise ValueError(
                f"method={method!r} is not a heat-map method; use one of "
                f"{', '.join(methods.METHODS)}."
            )
        self.net, self.spec, self.method = net.eval(), spec, method
        shape = spec.input_shape
        layers = feature_map_layers(net, shape)  # one blank forward for all three
        self.layer = default_layer(net, shape, layers) if layer is None else str(layer)
        self.module = resolve_layer(net, self.layer, shape, layers)
        self.map_size = layers[self.layer][-2:]  # (h, w) of the layer's map
        if method == "cam":
            self.head, self.pooling = methods.cam_head(net, self.module, self.layer, shape)

    def __repr__(self) -> str:
        return f"Explainer({self.method} at '{self.layer}' of {type(self.net).__name__})"

    def explain(self, images, target: int | str | None = None) -> Explanation:
        """uint8 (N, C, H, W) images (numpy or tensor) -> an ``Explanation``."""
        images = torch.as_tensor(images)
        if images.ndim != 4 or tuple(images.shape[1:]) != self.spec.input_shape:
            raise ValueError(
                f"Explainer expects uint8 images (N, {', '.join(map(str, self.spec.input_shape))})"
                f", got {tuple(images.shape)}; decode them at the spec's size "
                "(lightning_cls.inference.images.load_image_batch)."
            )
        param = next(self.net.parameters())
        x = self.spec.preprocess(images).to(device=param.device, dtype=param.dtype)
        gradients = self.method == "gradcam"
        maps, logits = methods.features_and_logits(self.net, self.module, x, gradients)
        probs = self.spec.decision.probabilities(logits.detach().float()).cpu()  # (N, K)
        pairs = self._pairs(probs, target)
        image, label = [i for i, _ in pairs], [k for _, k in pairs]
        if gradients:
            cams = methods.grad_cam(maps, logits, image, label)
        else:
            cams = methods.class_activation_map(maps, self.head, image, label)
        heat = methods.upsampled(cams, tuple(images.shape[-2:])).cpu()
        return Explanation(heat, image, label, probs)

    def heatmaps(self, images) -> torch.Tensor:
        """uint8 (N, C, H, W) -> (N, H, W) maps of each image's top predicted class (the
        prediction mosaic's ``explain``)."""
        return self.explain(images).first_per_image()

    def _pairs(self, probs: torch.Tensor, target: int | str | None) -> list[tuple[int, int]]:
        """(image, class) pairs to explain."""
        if target is not None:
            k = class_index(target, self.spec.classes)
            return [(i, k) for i in range(len(probs))]
        indices, _ = self.spec.decision.decide(probs, 1)
        top = probs.argmax(1).tolist()
        return [(i, k) for i, row in enumerate(indices) for k in (row or [top[i]])]


def class_index(target: int | str, classes: Sequence[str]) -> int:
    """A class given by name (or index) -> its index; a ``ValueError`` naming the classes."""
    names = list(classes)
    if isinstance(target, str) and target in names:
        return names.index(target)
    if isinstance(target, int) and not isinstance(target, bool) and 0 <= target < len(names):
        return target
    shown = ", ".join(names[:20]) + (f" (+{len(names) - 20} more)" if len(names) > 20 else "")
    raise ValueError(
        f"target={target!r} is not a class of this model; give a class name or an index "
        f"0..{len(names) - 1} (classes: {shown}), or target=null for the predicted class."
    )


def load_explainer(
    path: str | Path,
    method: str = "gradcam",
    layer: str | None = None,
    model_name: str | None = None,
) -> Explainer:
    """An ``Explainer`` for a ``.ckpt`` or ``model_weights.pt``; a ``ValueError`` saying why
    for an exported graph (it has no feature maps to read)."""
    from lightning_cls.inference.runtimes import artifact_kind
    from lightning_cls.inference.torch_models import load_torch_model

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"ckpt_path={str(path)!r} does not exist; give a .ckpt file.")
    kind = artifact_kind(path)
    if kind not in TORCH_KINDS:
        raise ValueError(unsupported_reason(kind))
    net, spec = load_torch_model(path, model_name=model_name)
    return Explainer(net, spec, method, layer)
