"""Shape tracing: each layer's input/output shape and parameter count for one batch, and a
plain-words explanation when a layer rejects the shape it is given.

``trace(net, x)`` hooks every leaf module, runs one forward pass and returns one
``LayerRecord`` per call. If the forward pass raises, the failing layer is the last one that
started but did not finish; ``ShapeMismatchError`` names it, the layer that fed it, both
shapes, and — when the network records the ``image_size``/``in_channels`` it was built for —
which data setting disagrees with the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


class ShapeMismatchError(ValueError):
    """A layer got an input of a shape it cannot take."""


@dataclass
class LayerRecord:
    name: str
    kind: str
    in_shape: tuple[int, ...] | None
    out_shape: tuple[int, ...] | None
    params: int


def _shape(value) -> tuple[int, ...] | None:
    if isinstance(value, torch.Tensor):
        return tuple(value.shape)
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        return tuple(value[0].shape)
    return None


def trace(net: nn.Module, x: torch.Tensor) -> list[LayerRecord]:
    """Run ``net(x)`` and record every leaf module call; raise ``ShapeMismatchError`` (from the
    original error) when a layer fails."""
    records: list[LayerRecord] = []
    handles = []
    for name, module in net.named_modules():
        if name and not list(module.children()):
            params = sum(p.numel() for p in module.parameters(recurse=False))

            def pre(mod, args, name=name, params=params):
                records.append(LayerRecord(name, type(mod).__name__, _shape(args), None, params))

            def post(mod, args, output):
                records[-1].out_shape = _shape(output)

            handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    try:
        net(x)
    except RuntimeError as err:
        raise ShapeMismatchError(explain(net, x, records, err)) from err
    finally:
        for handle in handles:
            handle.remove()
    return records


def _dims(shape: tuple[int, ...] | None) -> str:
    return "×".join(str(d) for d in shape[1:]) if shape else "?"


def _source(records: list[LayerRecord], failed: LayerRecord) -> LayerRecord | None:
    """The layer whose output reached ``failed``. For a Linear layer, look back past reshapes
    to the last feature map, so the message shows 64×7×7 rather than its flattened 3136."""
    done = [r for r in records if r is not failed and r.out_shape is not None]
    if failed.kind == "Linear":
        spatial = [r for r in done if len(r.out_shape) > 2]
        if spatial:
            return spatial[-1]
    return done[-1] if done else None


def explain(net: nn.Module, x: torch.Tensor, records: list[LayerRecord], err: Exception) -> str:
    failed = next((r for r in reversed(records) if r.out_shape is None), None)
    if failed is None:
        return f"Forward pass failed on input {tuple(x.shape)} outside any layer: {err}"
    layer = dict(net.named_modules())[failed.name]
    source = _source(records, failed)
    origin = (
        f"{source.name} ({_dims(source.out_shape)})" if source else f"the input ({_dims(x.shape)})"
    )
    got = failed.in_shape
    if isinstance(layer, nn.Linear) and got:
        what = f"{failed.name} expects {layer.in_features} input features but got {got[-1]} from {origin}"
    elif isinstance(layer, nn.modules.conv._ConvNd) and got and len(got) > 1:
        what = f"{failed.name} expects {layer.in_channels} input channels but got {got[1]} from {origin}"
        if source is None:
            return what + (
                f": num_channels={got[1]} does not match the model's in_channels="
                f"{layer.in_channels}; set model.in_channels=${{data.num_channels}}."
            )
    else:
        first = str(err).strip().splitlines()[0]
        what = f"{failed.name} ({failed.kind}) cannot take input {got} from {origin}: {first}"
    return what + _hint(net, x)


def _hint(net: nn.Module, x: torch.Tensor) -> str:
    """Compare the batch with the settings the network was built for, when it records them."""
    if x.ndim != 4:
        return ""
    size, channels = getattr(net, "image_size", None), getattr(net, "in_channels", None)
    if size is not None and tuple(x.shape[-2:]) != (size, size):
        got = x.shape[-1] if x.shape[-1] == x.shape[-2] else f"{x.shape[-2]}×{x.shape[-1]}"
        return (
            f": image_size={got} does not match the model's image_size={size}; set "
            f"model.image_size=${{data.image_size}} or resize the data to {size}."
        )
    if channels is not None and x.shape[1] != channels:
        return f": num_channels={x.shape[1]} does not match the model's in_channels={channels}."
    return "."


def format_table(records: list[LayerRecord]) -> str:
    """One line per layer call: name, type, input shape, output shape, parameters."""
    rows = [("layer", "type", "input", "output", "params")]
    for r in records:
        rows.append(
            (
                r.name,
                r.kind,
                str(list(r.in_shape or ())),
                str(list(r.out_shape or ())),
                f"{r.params:,}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    total = sum(r.params for r in records)
    lines.append(f"total parameters in traced layers: {total:,}")
    return "\n".join(lines)
