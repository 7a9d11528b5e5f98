"""The array operations of the inference path, for a numpy array or a torch tensor alike.

ONNX Runtime and OpenVINO take and return numpy arrays, so predicting with or serving their
files needs no torch at all: importing torch takes longer than the whole ONNX ``predict`` of
one image (docs/benchmarks.md, "Start-up"). Each function here takes a numpy array or a torch
tensor and returns the same kind, in float32 as the torch code computes; torch is imported only
when a tensor comes in (it is loaded already then). ``tests/inference/test_arrays.py`` checks
that both kinds give the same numbers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

Decision = tuple[list[list[int]], list[list[float]]]  # per row: class indices, probabilities


def is_numpy(x: Any) -> bool:
    return isinstance(x, np.ndarray)


def check_channels(mean: Sequence[float], std: Sequence[float], channels: int) -> None:
    if len(mean) != channels or len(std) != channels:
        raise ValueError(
            f"mean/std have {len(mean)}/{len(std)} values but the batch has {channels} "
            "channels; pass one value per channel."
        )


def normalize_numpy(images: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """uint8 (B, C, H, W) -> float32 ``(x / 255 - mean) / std``: the constants and the two
    float32 operations of the torch ``normalize``, so the same numbers bit for bit."""
    if images.dtype != np.uint8:
        raise TypeError(f"normalize expects uint8 images in [0, 255], got {images.dtype}.")
    check_channels(mean, std, images.shape[1])
    scale, shift = _constants(tuple(map(float, mean)), tuple(map(float, std)))
    out = images.astype(np.float32)  # (B, C, H, W)
    out *= scale
    out -= shift
    return out


@functools.lru_cache(maxsize=64)
def _constants(mean: tuple[float, ...], std: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    mean_, std_ = np.array(mean, np.float64), np.array(std, np.float64)
    scale = (1.0 / (255.0 * std_)).astype(np.float32).reshape(1, -1, 1, 1)
    shift = (mean_ / std_).astype(np.float32).reshape(1, -1, 1, 1)
    scale.flags.writeable = shift.flags.writeable = False  # shared by every call
    return scale, shift


def flip_lr(x):
    """(B, C, H, W) -> its horizontal mirror."""
    return x[..., ::-1] if is_numpy(x) else x.flip(-1)


def reflect_pad(x, p: int):
    """(B, C, H, W) -> (B, C, H + 2p, W + 2p), the edges mirrored (``F.pad(mode="reflect")``)."""
    if is_numpy(x):
        return np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), mode="reflect")
    import torch.nn.functional as F

    return F.pad(x, (p, p, p, p), mode="reflect")


def softmax(logits):
    """(B, K) logits -> float32 probabilities summing to 1 per row."""
    if not is_numpy(logits):
        return logits.float().softmax(1)
    x = logits.astype(np.float32)
    x -= x.max(axis=1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=1, keepdims=True)
    return x


def sigmoid(logits):
    """(B, K) logits -> float32 probabilities, one per class."""
    if not is_numpy(logits):
        return logits.float().sigmoid()
    x = logits.astype(np.float32)
    e = np.exp(-np.abs(x))  # never overflows: exp of a non-positive number
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(np.float32)


def ranked(probs) -> tuple[Any, Any]:
    """(B, K) -> (class indices by descending probability, the probabilities in that order)."""
    if not is_numpy(probs):
        order = probs.argsort(dim=1, descending=True)
        return order, probs.gather(1, order)
    order = np.argsort(-probs, axis=1, kind="stable")
    return order, np.take_along_axis(probs, order, axis=1)


def top_k(probs, k: int) -> Decision:
    """(B, K) -> per row the ``k`` most probable class indices and their probabilities."""
    k = min(k, probs.shape[1])
    if not is_numpy(probs):
        top = probs.topk(k, dim=1)
        return top.indices.tolist(), top.values.tolist()
    order, values = ranked(probs)
    return order[:, :k].tolist(), values[:, :k].tolist()


def concat(parts: list, like, width: int):
    """Row batches -> one (N, width) float32 of ``like``'s kind (empty when no parts)."""
    if is_numpy(like):
        return np.concatenate(parts) if parts else np.empty((0, width), np.float32)
    import torch

    return torch.cat(parts) if parts else torch.empty(0, width)


def call_numpy(run: Callable[[np.ndarray], np.ndarray], x):
    """``run`` (a runtime taking and returning numpy) on ``x``; a tensor in gives a tensor out
    (the exporter's read-back check compares tensors)."""
    if is_numpy(x):
        return run(np.ascontiguousarray(x))
    import torch

    return torch.from_numpy(run(x.detach().cpu().contiguous().numpy()))


def as_numpy(x) -> np.ndarray:
    """A float32 numpy array of ``x`` (a tensor is moved to the CPU)."""
    if is_numpy(x):
        return x.astype(np.float32, copy=False)
    return x.detach().cpu().float().numpy()


def as_kind(x: np.ndarray, like) -> torch.Tensor | np.ndarray:
    """``x`` (numpy) as the kind of ``like``: unchanged, or a tensor sharing its memory."""
    if is_numpy(like):
        return x
    import torch

    return torch.from_numpy(x)


def join(a, b):
    """(B, K) and (B, D) of one kind -> (B, K + D) float32 of that kind."""
    if is_numpy(a):
        return np.concatenate([a.astype(np.float32, copy=False), as_numpy(b)], axis=1)
    import torch

    return torch.cat([a.float(), b.float()], 1)
