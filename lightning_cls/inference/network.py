"""Rebuilding a network from its saved hyper-parameters, and checking it against data.

- ``build_network(model_name, model_kwargs, classes)``: the one function that turns a
  registry name + options (+ the class names, which fill in ``num_classes``) into an
  ``nn.Module``. The LightningModule, the export callback, ``inspect_model`` and the runtimes
  all call it.
- ``network_state_dict``: a LightningModule's (or a compiled wrapper's) state_dict -> the bare
  network's keys.
- ``check_same_data``: the one comparison of what a model was trained on with what the data
  provides (class names in order, channels, image size).

No Lightning, no Hydra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from lightning_cls.inference.spec import InputSpec
from lightning_cls.models import create_model

MAX_LISTED = 8  # items listed per category in a difference message


def build_network(
    model_name: str,
    model_kwargs: Mapping[str, Any] | None = None,
    classes: Sequence[str] | None = None,
) -> nn.Module:
    """``create_model(model_name, **model_kwargs)`` with ``num_classes`` filled in from
    ``classes`` when the options leave it out (``data=imagefolder`` counts its class folders,
    so the model config says ``num_classes: null``)."""
    kwargs = dict(model_kwargs or {})
    kwargs["num_classes"] = len(class_names(classes, kwargs.get("num_classes")))
    return create_model(model_name, **kwargs)


def class_names(classes: Sequence[str] | None, num_classes: int | None) -> list[str]:
    """The class names (``"0"``, ``"1"``, … when only a count is known)."""
    if classes:
        if num_classes is not None and num_classes != len(classes):
            raise ValueError(
                f"num_classes={num_classes} but {len(classes)} classes are named "
                f"({list(classes)[:10]}); set model.num_classes={len(classes)} (or "
                f"data.num_classes={len(classes)}, which it follows) or leave it unset."
            )
        return [str(c) for c in classes]
    if not num_classes:
        raise ValueError(
            "Cannot tell the number of classes: pass classes (the data's class names) or "
            "num_classes (model.num_classes)."
        )
    return [str(i) for i in range(num_classes)]


def network_state_dict(
    state: Mapping[str, torch.Tensor], attribute: str = "net"
) -> dict[str, torch.Tensor]:
    """Keys of the bare network: drop the LightningModule's ``<attribute>.`` prefix and the
    ``_orig_mod.`` that a ``torch.compile`` wrapper inserts; skip metric buffers. A state
    without that prefix (already a bare network's) keeps all its keys."""
    prefix = f"{attribute}."
    has_prefix = any(k.startswith(prefix) for k in state)
    out = {}
    for key, value in state.items():
        if has_prefix:
            if not key.startswith(prefix):
                continue  # metrics, criterion
            key = key[len(prefix) :]
        out[key.replace("_orig_mod.", "")] = value
    return out


def check_same_data(
    trained: InputSpec | Mapping[str, Any],
    data: InputSpec | Mapping[str, Any],
    what: str = "The checkpoint",
    data_name: str = "the data",
) -> None:
    """Raise a ``ValueError`` when ``data`` describes other images than a model was trained on.

    ``trained`` is what the model carries (a checkpoint's ``hyper_parameters``, an artifact's
    metadata), ``data`` what the data provides (``ImageDataModule.spec``, or the hyper-parameters
    of the module about to be trained); either may be an ``InputSpec``. Compared when both
    sides have them: the class *names* in order (same count but other names is an error too),
    ``num_channels`` and ``image_size``. The message lists the difference. Used before
    resuming, evaluating and calibrating.
    """
    trained, data = (x.to_dict() if isinstance(x, InputSpec) else x for x in (trained, data))
    problems = []
    ours, theirs = trained.get("classes"), data.get("classes")
    if ours is not None and theirs is not None and list(ours) != list(theirs):
        problems.append(_class_difference(list(ours), list(theirs), data_name))
    for key in ("num_channels", "image_size"):
        if trained.get(key) is not None and data.get(key) is not None and trained[key] != data[key]:
            problems.append(f"{key}={trained[key]} but {data_name} has {key}={data[key]}")
    if problems:
        raise ValueError(
            f"{what} was trained on other data: " + "; ".join(problems) + ". Use data with the "
            "same class folders and image shape as the run that wrote it, or train a new model."
        )


def _class_difference(trained: list[str], data: list[str], data_name: str) -> str:
    only_trained = [c for c in trained if c not in data]
    only_data = [c for c in data if c not in trained]
    if not only_trained and not only_data:
        return (
            f"the same {len(trained)} classes in another order (class index i means another "
            f"class): trained {_shown(trained)}, {data_name} {_shown(data)}"
        )
    parts = [f"{len(trained)} classes vs {len(data)} in {data_name}"]
    if only_trained:
        parts.append(f"only in the model: {_shown(only_trained)}")
    if only_data:
        parts.append(f"only in {data_name}: {_shown(only_data)}")
    return "classes differ (" + ", ".join(parts) + ")"


def _shown(items: list[str]) -> str:
    more = f" (+{len(items) - MAX_LISTED} more)" if len(items) > MAX_LISTED else ""
    return "[" + ", ".join(map(str, items[:MAX_LISTED])) + "]" + more


class FeatureNet(nn.Module):
    """``net`` with a second output, the features of the feature-space rejection rules
    (``inference/feature_rules.py``), beside the logits.

    The features are two parts, each L2-normalised and concatenated, (B, D + C1):

    - the input of ``net``'s last ``nn.Linear`` (the penultimate features, (B, D)): what the
      network knows about an image's class, which separates unknown *classes*;
    - the first ``nn.Conv2d``'s responses to the input, max-pooled over the image (B, C1):
      low-level statistics (edges, colours, contrast) that separate pictures unlike the
      training photos (noise, drawings, upscaled digits) even where the penultimate
      features do not. On CIFAR-10 photos this took the knn rule from 0.64-0.67 to 0.99
      AUROC on upscaled digits (docs/guides/calibration.md). A network without a convolution
      taking the input's channels (an MLP) has only the first part, unnormalised.

    ``body`` is a copy of ``net`` whose head is an ``nn.Identity`` (so it returns the
    features), and the logits are ``head(body(x))``; the first convolution is applied to the
    input once more (a small share of the work). One pass, no hooks, a plain graph that
    exports to ONNX, TorchScript and ``.pt2`` with two named outputs. The copy shares
    ``net``'s parameters. A network that changes the head's output afterwards (anything but
    a linear rescaling, as airbench's ``logit_scale`` is) is refused: its features would not
    be what its logits come from.
    """

    def __init__(self, net: nn.Module, input_shape: Sequence[int] | None = None):
        super().__init__()
        name, self.head = _last_linear(net)
        self.body = _without(net, name)
        channels = tuple(input_shape)[0] if input_shape is not None else None
        self.stem = _first_conv(net, channels)  # shared with ``net``; None: no low-level part
        self.train(net.training)
        if input_shape is not None:
            self._check(net, tuple(input_shape))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        penultimate = torch.flatten(self.body(x), 1)  # (B, D)
        logits = self.head(penultimate)  # (B, K)
        if self.stem is None:
            return logits, penultimate
        low = torch.amax(self.stem(x), dim=(2, 3))  # (B, C1): each filter's strongest response
        parts = (nn.functional.normalize(penultimate, dim=1), nn.functional.normalize(low, dim=1))
        return logits, torch.cat(parts, 1)  # (B, D + C1)

    @torch.no_grad()
    def _check(self, net: nn.Module, input_shape: tuple[int, ...]) -> None:
        weight = self.head.weight
        x = torch.randn(2, *input_shape, dtype=weight.dtype, device=weight.device)
        was = net.training
        net.eval()
        try:
            expected, (logits, _) = net(x), self(x)
        finally:
            net.train(was)
        if not torch.allclose(expected, logits, atol=1e-4, rtol=1e-3):
            raise ValueError(
                f"{type(net).__name__} changes its last linear layer's output before returning "
                "it, so that layer's input is not what its logits come from; the feature-space "
                "rejection rules (knn, mahalanobis) cannot use it: use reject=msp or energy."
            )


def with_features(net: nn.Module, input_shape: Sequence[int] | None = None) -> FeatureNet:
    """``net`` giving ``(logits, features)`` (``FeatureNet``; one already is, as it is),
    checked on a random batch of ``input_shape`` when given."""
    return net if isinstance(net, FeatureNet) else FeatureNet(net, input_shape)


def _last_linear(net: nn.Module) -> tuple[str, nn.Linear]:
    heads = [(name, m) for name, m in net.named_modules() if isinstance(m, nn.Linear)]
    if not heads:
        raise ValueError(
            f"{type(net).__name__} has no nn.Linear head, so it has no penultimate features for "
            "reject=knn or reject=mahalanobis; use reject=msp or energy."
        )
    return heads[-1]


def _first_conv(net: nn.Module, channels: int | None) -> nn.Conv2d | None:
    """The first ``nn.Conv2d`` of ``net`` when it takes the input's ``channels`` (its stem),
    else None."""
    conv = next((m for m in net.modules() if isinstance(m, nn.Conv2d)), None)
    if conv is None or (channels is not None and conv.in_channels != channels):
        return None
    return conv


def _without(net: nn.Module, name: str) -> nn.Module:
    """A shallow structural copy of ``net`` with the module ``name`` replaced by ``Identity``;
    parameters and buffers are shared, not copied."""
    import copy

    parent_name, _, leaf = name.rpartition(".")
    body = copy.copy(net)
    body._modules = dict(net._modules)
    node = body
    for part in parent_name.split(".") if parent_name else []:
        child = copy.copy(node._modules[part])
        child._modules = dict(child._modules)
        node._modules[part] = child
        node = child
    node._modules[leaf] = nn.Identity()
    return body
