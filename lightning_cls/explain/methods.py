"""Heat maps at one layer: Grad-CAM (gradients) and CAM (no gradients), both hook-based.

- Grad-CAM (Selvaraju et al. 2017): the layer's map A (B, C, h, w) weighted per channel by
  the mean gradient of the target logit, ``relu(sum_c mean_hw(dy/dA_c) * A_c)``. Works for
  any layer of any convolutional network.
- CAM (Zhou et al. 2016): ``sum_c W[k, c] * A_c`` with ``W`` the weights of a linear head
  over the globally pooled map: one forward, no gradients. Only networks whose head is
  global pooling + one linear layer (resnet18, airbench, torchvision ResNets) have one.
  For such a network and its pooled layer, Grad-CAM of average pooling equals CAM after
  the ReLU (the mean gradient of channel c is ``W[k, c] / hw``), which a test checks.

Our own implementation, not the ``grad-cam`` package: that package imports scikit-learn,
pandas, SciPy and OpenCV on import (5-10 s here), which a server or a one-image command
should not pay for 20 lines of tensor code.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

METHODS = ("gradcam", "cam")


class _Capture:
    """A forward hook keeping a layer's output while in ``with``; the layer's output is handed on as a clone, so an in-place op after the layer
    (``ReLU(inplace=True)``) cannot modify the tensor the gradient is taken at."""

    def __init__(self, layer: nn.Module):
        self.layer = layer
        self.map: torch.Tensor | None = None

    def __enter__(self) -> _Capture:
        self.handle = self.layer.register_forward_hook(self._keep_map)
        return self

    def __exit__(self, *exc) -> None:
        self.handle.remove()

    def _keep_map(self, module, inputs, output):
        self.map = output
        return output.clone()


def features_and_logits(net: nn.Module, layer: nn.Module, x: torch.Tensor, gradients: bool):
    """One forward of normalized images ``x`` (B, C, H, W): ``layer``'s map (B, C', h, w) and
    the logits (B, K), in a graph when ``gradients`` (Grad-CAM), without one otherwise (CAM)."""
    with torch.inference_mode(False), torch.set_grad_enabled(gradients), _Capture(layer) as c:
        if gradients:  # a graph even when the weights are frozen
            x = x.detach().clone().requires_grad_(True)
        logits = net(x)
    return c.map, logits


def grad_cam(maps: torch.Tensor, logits: torch.Tensor, image: list[int], label: list[int]):
    """Grad-CAM of each (image, label) pair from one forward's ``maps`` and ``logits``:
    (M, h, w) float >= 0. An image explained for several labels (multi-label) gets one
    backward pass per label, so the labels' gradients do not mix."""
    cams = torch.zeros(len(image), *maps.shape[-2:], device=maps.device)
    pending = list(range(len(image)))
    while pending:  # each round takes every image at most once
        now, later, seen = [], [], set()
        for p in pending:
            (later if image[p] in seen else now).append(p)
            seen.add(image[p])
        rows = torch.tensor([image[p] for p in now], device=logits.device)
        cols = torch.tensor([label[p] for p in now], device=logits.device)
        with torch.inference_mode(False), torch.enable_grad():
            score = logits[rows, cols].sum()
            (grads,) = torch.autograd.grad(score, maps, retain_graph=bool(later))
        weights = grads[rows].mean((2, 3), keepdim=True)  # (m, C, 1, 1)
        cams[now] = F.relu((weights * maps[rows]).sum(1)).detach().float()  # (m, h, w)
        pending = later
    return cams


def cam_head(net: nn.Module, layer: nn.Module, layer_name: str, input_shape):
    """The head CAM weighs ``layer``'s map with (the last ``nn.Linear`` the network runs) and
    how it pools the map (``avg`` or ``max``); a ``ValueError`` saying why CAM cannot explain
    this network at this layer otherwise. Checked on two random images, in one forward."""
    x = torch.randn(2, *input_shape, generator=torch.Generator().manual_seed(0))
    param = next(net.parameters())
    x = x.to(device=param.device, dtype=param.dtype)
    linears: list[tuple[str, nn.Linear, torch.Tensor]] = []
    handles = [
        m.register_forward_pre_hook(lambda m, i, n=n: linears.append((n, m, i[0])))
        for n, m in net.named_modules()
        if isinstance(m, nn.Linear)
    ]
    try:
        with torch.no_grad(), _Capture(layer) as capture:
            net(x)
    finally:
        for handle in handles:
            handle.remove()
    if not linears:
        raise ValueError(f"{type(net).__name__} has no nn.Linear head; use method=gradcam.")
    head_name, head, pooled = linears[-1]
    maps = capture.map
    if maps is not None and pooled.shape == maps.shape[:2]:
        for kind, pool in (("avg", maps.mean((2, 3))), ("max", maps.amax((2, 3)))):
            if torch.allclose(pooled, pool, rtol=1e-4, atol=1e-5):
                return head, kind
    raise ValueError(
        f"method=cam needs a head that is global pooling + one linear layer over layer "
        f"'{layer_name}'; {type(net).__name__}'s head '{head_name}' takes "
        f"{tuple(pooled.shape)} instead of the pooled map of "
        f"{tuple(maps.shape) if maps is not None else 'nothing'}. Use method=gradcam "
        "(any convolutional network), or the layer the head pools (layer=null)."
    )


def class_activation_map(maps: torch.Tensor, head: nn.Linear, image: list[int], label: list[int]):
    """CAM of each (image, label) pair from the map ``head`` pools: (M, h, w) float, signed."""
    with torch.no_grad():
        weights = head.weight[label].float()  # (M, C)
        return torch.einsum("mchw,mc->mhw", maps[image].float(), weights)  # (M, h, w)


def upsampled(cams: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """(B, h, w) maps -> (B, H, W) in [0, 1]: bilinear to the image size, then each map
    scaled from its minimum to its maximum (a flat map is all zeros)."""
    maps = F.interpolate(cams[:, None].float(), size=size, mode="bilinear", align_corners=False)
    maps = maps[:, 0]  # (B, H, W)
    low = maps.amin((1, 2), keepdim=True)
    span = maps.amax((1, 2), keepdim=True) - low
    return torch.where(span > 0, (maps - low) / span.clamp(min=1e-12), torch.zeros_like(maps))
