"""Which layer a heat map is read from: the default per network, and a layer named by the user.

The default is found by running one blank image through the network and watching which
modules output a feature map (B, C, h, w) with more than one position: it is the last such
module to finish, the map the head pools (simplecnn ``features``, resnet18 ``layer4``,
airbench ``blocks``, torchvision's resnet18 ``layer4`` and mobilenet_v3_small ``features``
at 224x224). A container finishes after its
children, so the default is the outermost module holding the last convolutional stage. A
network may name its own with a ``cam_layer`` attribute.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import torch
from torch import nn

SHOWN = 12  # layer names listed in an error message


def feature_map_layers(net: nn.Module, input_shape: Sequence[int]) -> dict[str, tuple[int, ...]]:
    """``{name: output shape}`` of every module that outputs a (1, C, h, w) map with h*w > 1,
    in the order the modules finish on one blank image of ``input_shape`` (C, H, W)."""
    shapes: dict[str, tuple[int, ...]] = {}

    def record(name: str):
        def hook(module, inputs, output):
            if torch.is_tensor(output) and output.ndim == 4 and output.shape[-2:].numel() > 1:
                shapes.pop(name, None)  # a module run twice counts where it last finished
                shapes[name] = tuple(output.shape)

        return hook

    handles = [m.register_forward_hook(record(n)) for n, m in net.named_modules() if n]
    param = next(net.parameters(), None)
    x = torch.zeros(1, *input_shape)
    if param is not None:
        x = x.to(device=param.device, dtype=param.dtype)
    was_training = net.training
    try:
        net.eval()
        with torch.no_grad():
            net(x)
    finally:
        net.train(was_training)
        for handle in handles:
            handle.remove()
    return shapes


def default_layer(
    net: nn.Module, input_shape: Sequence[int], layers: dict[str, tuple] | None = None
) -> str:
    """The name of the layer heat maps are read from unless one is given (module docstring).
    ``layers``: ``feature_map_layers``' answer, when the caller has it."""
    named = getattr(net, "cam_layer", None)
    if named is not None:
        return str(named)
    layers = feature_map_layers(net, input_shape) if layers is None else layers
    if not layers:
        raise ValueError(
            f"{type(net).__name__} has no convolutional feature map (no module outputs "
            f"(B, C, H, W) with H*W > 1 for input {tuple(input_shape)}); heat maps need a "
            "convolutional network (e.g. model=simplecnn, resnet18, airbench)."
        )
    return list(layers)[-1]


def resolve_layer(
    net: nn.Module, name: str, input_shape: Sequence[int], layers: dict[str, tuple] | None = None
) -> nn.Module:
    """The module called ``name``; a ``ValueError`` listing the valid names (and the closest
    one) when it does not exist or outputs no feature map."""
    modules = dict(net.named_modules())
    layers = feature_map_layers(net, input_shape) if layers is None else layers
    if name in layers:
        return modules[name]
    valid = sorted(layers, key=lambda n: (n.count("."), list(layers).index(n)))
    close = difflib.get_close_matches(str(name), valid, n=1, cutoff=0.5)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    more = f" (+{len(valid) - SHOWN} more)" if len(valid) > SHOWN else ""
    listed = ", ".join(valid[:SHOWN]) + more
    what = (
        "outputs no feature map (B, C, H, W) with H*W > 1"
        if name in modules
        else f"is not a module of {type(net).__name__}"
    )
    raise ValueError(
        f"layer={name!r} {what}.{hint} Layers with a feature map: {listed}; the default is "
        f"'{default_layer(net, input_shape, layers)}' (layer=null)."
    )
