"""Batch-level augmentation as small pure tensor functions (airbench's ``batch_crop``,
``batch_flip_lr``), run on whatever device the batch is on.

Semantics match torchvision's per-sample ``RandomCrop(size, padding=p)`` (zero fill, offsets
uniform in ``[0, 2p]``), ``RandomHorizontalFlip(0.5)``, ``RandomResizedCrop(size)`` (the same
scale/ratio sampler; antialiased bilinear resize as torchvision's tensor path) and, for eval,
``CenterCrop(size)`` of an image already resized to the cached decode size. Random draws are made on the CPU
from an optional ``torch.Generator`` and then moved to the batch's device, so a seeded run
draws the same offsets and flips on a CPU and on a GPU.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F

from lightning_cls.data.autoaugment import (
    POLICIES,
    auto_augment,
    batch_erase,
    random_erasing_params,
)
from lightning_cls.inference.spec import normalize as _normalize_float32
from lightning_cls.inference.spec import normalize_constants

INPUT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def random_offsets(
    batch_size: int, padding: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """(B, 2) int64 (top, left) offsets, each uniform in ``[0, 2*padding]``."""
    return torch.randint(0, 2 * padding + 1, (batch_size, 2), generator=generator)


def random_flips(
    batch_size: int, p: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """(B,) bool mask, each True with probability ``p`` (as ``torch.rand(1) < p`` per sample)."""
    return torch.rand(batch_size, generator=generator) < p


FLIPS = ("random", "alternate")
TRANSLATE_PADS = ("zeros", "reflect")


def check_flip_and_pad(flip: str, hflip: bool, translate_pad: str) -> None:
    """``augment.flip`` and ``augment.translate_pad``, or one line naming the bad value."""
    if flip not in FLIPS:
        raise ValueError(f"Unknown augment.flip={flip!r}; use one of {', '.join(FLIPS)}.")
    if flip == "alternate" and not hflip:
        raise ValueError(
            "augment.flip=alternate says how to flip, and augment.hflip=false turns flipping "
            "off; set augment.hflip=true (or augment.flip=random)."
        )
    if translate_pad not in TRANSLATE_PADS:
        raise ValueError(
            f"Unknown augment.translate_pad={translate_pad!r}; use one of {', '.join(TRANSLATE_PADS)}."
        )


def image_coins(indices: torch.Tensor, seed: int) -> torch.Tensor:
    """(B,) bool: a fair coin per image index, fixed by ``seed`` (the same image always gets
    the same one, whatever batch it lands in). A 32-bit integer hash (Thomas Mueller's
    ``0x45d9f3b`` mixer); the products stay below 2**63, so int64 arithmetic is exact."""
    x = (indices.long().cpu() + (seed * 0x9E3779B1)) & 0xFFFFFFFF  # (B,)
    for _ in range(2):
        x = ((x ^ (x >> 16)) * 0x45D9F3B) & 0xFFFFFFFF
    x = x ^ (x >> 16)
    return (x & 1).bool()


def alternate_flips(indices: torch.Tensor, epoch: int, seed: int) -> torch.Tensor:
    """(B,) bool: airbench's derandomised flip. Each image is mirrored on every other epoch;
    whether it starts mirrored (epoch 0) is its own coin (``image_coins``). Over any two
    consecutive epochs every image is seen both ways, which random flips only give on
    average (airbench94: "alternating flip", KellerJordan/cifar10-airbench)."""
    return image_coins(indices, seed) ^ bool(epoch % 2)


def batch_crop(
    images: torch.Tensor,
    padding: int,
    generator: torch.Generator | None = None,
    offsets: torch.Tensor | None = None,
    pad_mode: str = "zeros",
) -> torch.Tensor:
    """Pad by ``padding`` (``pad_mode``: ``zeros``, or ``reflect``: the edge pixels mirrored,
    as airbench94 pads) and crop back to the input size at random offsets.

    ``offsets`` (B, 2) of (top, left) in ``[0, 2*padding]`` may be given for exact tests.
    """
    if padding < 0:
        raise ValueError(f"crop padding must be >= 0, got {padding}.")
    if pad_mode not in TRANSLATE_PADS:
        raise ValueError(
            f"Unknown augment.translate_pad={pad_mode!r}; use one of {', '.join(TRANSLATE_PADS)}."
        )
    if padding == 0:
        return images
    b, c, h, w = images.shape  # (B, C, H, W)
    if pad_mode == "reflect" and padding >= min(h, w):
        raise ValueError(
            f"augment.translate_pad=reflect needs augment.crop_padding < the image side "
            f"({min(h, w)} px), got {padding}; lower augment.crop_padding or use "
            "augment.translate_pad=zeros."
        )
    if offsets is None:
        offsets = random_offsets(b, padding, generator)
    offsets = offsets.to(images.device)
    if pad_mode == "reflect":
        padded = F.pad(images, (padding,) * 4, mode="reflect")  # (B, C, H+2p, W+2p)
    else:
        padded = F.pad(images, (padding,) * 4)  # (B, C, H+2p, W+2p)
    rows = offsets[:, 0, None] + torch.arange(h, device=images.device)  # (B, H)
    cols = offsets[:, 1, None] + torch.arange(w, device=images.device)  # (B, W)
    # One gather over the flattened padded image: each output pixel reads its own source
    # pixel. About 4x faster on CPU than advanced indexing ``padded[b, rows, cols]``.
    index = rows[:, :, None] * (w + 2 * padding) + cols[:, None, :]  # (B, H, W)
    index = index.view(b, 1, h * w).expand(b, c, h * w)  # (B, C, H*W)
    return padded.flatten(2).gather(2, index).view(b, c, h, w)  # (B, C, H, W)


def batch_flip_lr(
    images: torch.Tensor,
    p: float = 0.5,
    generator: torch.Generator | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mirror each image left-right with probability ``p`` (or where ``mask`` is True)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"flip probability must be in [0, 1], got {p}.")
    if mask is None:
        mask = random_flips(images.shape[0], p, generator)
    mask = mask.to(images.device)[:, None, None, None]  # (B, 1, 1, 1)
    return torch.where(mask, images.flip(-1), images)  # (B, C, H, W)


def random_resized_crop_params(
    batch_size: int,
    height: int,
    width: int,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3 / 4, 4 / 3),
    generator: torch.Generator | None = None,
    attempts: int = 10,
) -> torch.Tensor:
    """(B, 4) int64 boxes (top, left, h, w): ``RandomResizedCrop.get_params`` for a whole batch.

    Each sample takes the first of ``attempts`` candidates that fits (area uniform in
    ``scale`` x H*W, log aspect ratio uniform in ``log(ratio)``, position uniform), else
    torchvision's fallback: the largest centred crop with the aspect ratio clamped to ``ratio``.
    """
    if not 0 < scale[0] <= scale[1] or not 0 < ratio[0] <= ratio[1]:
        raise ValueError(
            f"Need 0 < scale[0] <= scale[1] and 0 < ratio[0] <= ratio[1], got "
            f"scale={tuple(scale)}, ratio={tuple(ratio)}."
        )
    area = height * width
    u_area = torch.rand(batch_size, attempts, generator=generator, dtype=torch.float64)
    u_ratio = torch.rand(batch_size, attempts, generator=generator, dtype=torch.float64)
    u_top = torch.rand(batch_size, attempts, generator=generator, dtype=torch.float64)
    u_left = torch.rand(batch_size, attempts, generator=generator, dtype=torch.float64)
    target = area * (scale[0] + (scale[1] - scale[0]) * u_area)  # (B, A)
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = torch.exp(lo + (hi - lo) * u_ratio)  # (B, A)
    w = torch.round(torch.sqrt(target * aspect)).long()
    h = torch.round(torch.sqrt(target / aspect)).long()
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)  # (B, A)
    top = (u_top * (height - h + 1)).long().clamp(min=0)
    left = (u_left * (width - w + 1)).long().clamp(min=0)
    first = fits.long().argmax(1, keepdim=True)  # index of the first fitting attempt
    boxes = torch.cat([t.gather(1, first) for t in (top, left, h, w)], 1)  # (B, 4)
    # Fallback (no attempt fitted): torchvision's central crop.
    in_ratio = width / height
    if in_ratio < min(ratio):
        fw, fh = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        fw, fh = int(round(height * max(ratio))), height
    else:
        fw, fh = width, height
    fallback = torch.tensor([(height - fh) // 2, (width - fw) // 2, fh, fw])
    return torch.where(fits.any(1, keepdim=True), boxes, fallback)


def batch_resized_crop(
    images: torch.Tensor,
    boxes: torch.Tensor,
    size: int,
    flips: torch.Tensor | None = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Crop each image to its (top, left, h, w) box and resize it to ``size`` x ``size``.

    Bilinear with antialiasing, as torchvision's ``resized_crop`` on tensors. On the CPU the
    uint8 kernel runs per sample on a channels-last copy of the crop (its vectorised path: 2x
    the NCHW one, identical pixels; faster than any batched float path measured: grid_sample,
    roi_align), the crops split over ``torch.get_num_threads()`` threads (the kernel releases
    the GIL; one crop is too small for intra-op threads); elsewhere each crop is resized in
    float32 and rounded back to uint8.

    Optionally fused, crop by crop while the crop is in cache (no pass over the whole batch):
    ``flips`` (B,) bool mirrors the chosen crops left-right (as ``batch_flip_lr`` on the
    output), and with ``mean`` and ``std`` the result is ``normalize(out, mean, std, dtype)``
    (the same arithmetic, identical values) instead of uint8.
    """
    if (mean is None) != (std is None):
        raise ValueError("batch_resized_crop needs both mean and std, or neither.")
    uint8_kernel = images.device.type == "cpu"
    fmt = torch.channels_last if uint8_kernel else torch.contiguous_format
    to_float = mean is not None
    if to_float:
        constants = normalize_constants(mean, std, images.shape[1], images.device)
        scale, shift = (c[0] for c in constants)  # (C, 1, 1)
    out = torch.empty(
        images.shape[0],
        images.shape[1],
        size,
        size,
        dtype=dtype if to_float else images.dtype,
        device=images.device,
        memory_format=fmt,
    )
    boxes_list = boxes.tolist()
    flip_list = [False] * len(boxes_list) if flips is None else flips.tolist()

    def resize(indices: range) -> None:
        for k in indices:
            top, left, h, w = boxes_list[k]
            crop = images[k : k + 1, :, top : top + h, left : left + w]  # (1, C, h, w)
            crop = crop.contiguous(memory_format=fmt) if uint8_kernel else crop.float()
            resized = F.interpolate(
                crop, size=(size, size), mode="bilinear", antialias=True, align_corners=False
            )[0]  # (C, size, size)
            if not uint8_kernel:
                resized = resized.round_().clamp_(0, 255)
            if flip_list[k]:
                resized = resized.flip(-1)
            out[k] = resized.float().mul_(scale).sub_(shift) if to_float else resized

    threads = min(torch.get_num_threads(), len(boxes_list)) if uint8_kernel else 1
    if threads > 1:
        parts = [range(i, len(boxes_list), threads) for i in range(threads)]
        list(_crop_pool(threads).map(resize, parts))  # list(): re-raise a worker's error
    else:
        resize(range(len(boxes_list)))
    return out  # (B, C, size, size)


_POOLS: dict[int, ThreadPoolExecutor] = {}
# A forked child (a DataLoader worker, a user's fork) inherits the pools without their threads:
# work submitted there would wait forever. The child starts with none and makes its own.
os.register_at_fork(after_in_child=_POOLS.clear)


def _crop_pool(threads: int) -> ThreadPoolExecutor:
    """One long-lived pool per thread count (a new pool per batch costs thread start-up)."""
    if threads not in _POOLS:
        _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="lightning_cls-crop")
    return _POOLS[threads]


def center_crop(images: torch.Tensor, size: int) -> torch.Tensor:
    """The centre ``size`` x ``size`` square (torchvision's ``CenterCrop`` offsets)."""
    h, w = images.shape[-2:]
    if size > min(h, w):
        raise ValueError(f"center_crop size {size} exceeds the images' {h}x{w}.")
    top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))
    return images[..., top : top + size, left : left + size]


def normalize(
    images: torch.Tensor,
    mean: Sequence[float],
    std: Sequence[float],
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """uint8 (B, C, H, W) in [0, 255] -> ``dtype`` normalized per channel, as ToTensor+Normalize.

    The arithmetic runs in float32 and only the result is cast, so a bf16 batch is the
    rounded float32 batch (not an accumulation of bf16 rounding errors).
    """
    return _normalize_float32(images, mean, std).to(dtype)  # (B, C, H, W)


class BatchAugment:
    """uint8 batch -> augmented (train) or plain (eval) normalized float batch.

    ``dtype`` may be ``torch.bfloat16``/``torch.float16`` (or their names) to hand the network
    lower-precision input. ``image_size``: the size handed to the network when the stored
    images are larger (photos cached at a decode size): training takes a random resized crop
    (``random_resized_crop=True``, scale/ratio as torchvision's defaults) or the centre crop,
    evaluation the centre crop (torchvision's Resize + CenterCrop preset). ``auto_augment``
    (``randaugment``, ``trivialaugment``, ``autoaugment_cifar10``; ``lightning_cls.data.autoaugment``)
    runs on the uint8 crops after the flip, each sample its own draw; ``random_erasing`` = p
    erases a box of the normalized batch (torchvision's references' order). Random draws come
    from the ``generator`` passed to each call (the loaders seed one per batch), else from the
    global RNG.

    ``flip``: ``random`` (each image a fresh coin per epoch) or ``alternate`` (airbench's
    derandomised flip, ``alternate_flips``: needs each image's dataset ``indices``, the
    ``epoch`` and the ``seed`` with each call). ``translate_pad``: what the random translate
    (``crop_padding``) fills the border with, ``zeros`` or ``reflect``.
    """

    def __init__(
        self,
        mean: Sequence[float],
        std: Sequence[float],
        crop_padding: int = 0,
        hflip: bool = False,
        channels_last: bool = False,
        dtype: torch.dtype | str = torch.float32,
        flip_p: float = 0.5,
        image_size: int | None = None,
        random_resized_crop: bool = False,
        rrc_scale: Sequence[float] = (0.08, 1.0),
        rrc_ratio: Sequence[float] = (3 / 4, 4 / 3),
        auto_augment: str | None = None,
        random_erasing: float = 0.0,
        flip: str = "random",
        translate_pad: str = "zeros",
    ):
        check_flip_and_pad(flip, hflip, translate_pad)
        if auto_augment is not None and auto_augment not in POLICIES:
            raise ValueError(
                f"Unknown augment.auto_augment={auto_augment!r}; use one of {', '.join(POLICIES)} "
                "or null."
            )
        if not 0.0 <= random_erasing <= 1.0:
            raise ValueError(
                f"augment.random_erasing={random_erasing} must be a probability in [0, 1] (0: off)."
            )
        if image_size is not None and image_size < 1:
            raise ValueError(f"image_size must be >= 1, got {image_size}.")
        if crop_padding < 0:
            raise ValueError(f"crop_padding must be >= 0, got {crop_padding}.")
        if len(mean) != len(std):
            raise ValueError(f"mean has {len(mean)} values but std has {len(std)}.")
        if any(s <= 0 for s in std):
            raise ValueError(f"std values must be > 0, got {tuple(std)}.")
        if not 0.0 <= flip_p <= 1.0:
            raise ValueError(f"flip probability must be in [0, 1], got {flip_p}.")
        if isinstance(dtype, str):
            if dtype not in INPUT_DTYPES:
                raise ValueError(
                    f"Unknown input dtype '{dtype}'; use one of {', '.join(INPUT_DTYPES)}."
                )
            dtype = INPUT_DTYPES[dtype]
        self.mean, self.std = tuple(mean), tuple(std)
        self.crop_padding, self.hflip, self.flip_p = crop_padding, hflip, flip_p
        self.channels_last, self.dtype = channels_last, dtype
        self.image_size, self.random_resized_crop = image_size, random_resized_crop
        self.rrc_scale, self.rrc_ratio = tuple(rrc_scale), tuple(rrc_ratio)
        self.auto_augment, self.random_erasing = auto_augment, random_erasing
        self.flip, self.translate_pad = flip, translate_pad

    def flips(
        self,
        batch_size: int,
        generator: torch.Generator | None = None,
        indices: torch.Tensor | None = None,
        epoch: int = 0,
        seed: int = 0,
    ) -> torch.Tensor:
        """(B,) bool: which training images to mirror, by ``flip``."""
        if self.flip == "random":
            return random_flips(batch_size, self.flip_p, generator)
        if indices is None:
            raise ValueError(
                "augment.flip=alternate needs each image's index in the dataset, which only the "
                "in-memory tensor pipeline gives (data.pipeline=tensor; not streamed data); "
                "use augment.flip=random here."
            )
        return alternate_flips(indices, epoch, seed)

    def __call__(
        self,
        images: torch.Tensor,
        train: bool,
        generator: torch.Generator | None = None,
        indices: torch.Tensor | None = None,
        epoch: int = 0,
        seed: int = 0,
    ) -> torch.Tensor:
        """``indices`` (B,) (each image's place in its split), ``epoch`` and ``seed``: what
        ``flip="alternate"`` decides by."""
        b, _, h, w = images.shape  # (B, C, H, W) uint8
        size = self.image_size or min(h, w)
        if train and self.random_resized_crop:
            boxes = random_resized_crop_params(b, h, w, self.rrc_scale, self.rrc_ratio, generator)
            fuse = self.crop_padding == 0 and not self.auto_augment and not self.random_erasing
            if fuse:
                # Crop, flip and normalize fused crop by crop: no memory-bound whole-batch pass.
                flips = self.flips(b, generator, indices, epoch, seed) if self.hflip else None
                x = batch_resized_crop(images, boxes, size, flips, self.mean, self.std, self.dtype)
                return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x
            images = batch_resized_crop(images, boxes, size)  # (B, C, size, size)
        elif (h, w) != (size, size):
            images = center_crop(images, size)  # (B, C, size, size)
        if train:
            images = batch_crop(
                images, self.crop_padding, generator, pad_mode=self.translate_pad
            )  # (B, C, H, W) uint8
            if self.hflip:
                mask = self.flips(b, generator, indices, epoch, seed)  # (B,) bool
                images = batch_flip_lr(images, mask=mask)
            if self.auto_augment:
                images = auto_augment(images, self.auto_augment, generator)  # (B, C, H, W) uint8
        x = normalize(images, self.mean, self.std, self.dtype)  # (B, C, H, W) dtype
        if train and self.random_erasing:
            boxes = random_erasing_params(
                b, *x.shape[-2:], self.random_erasing, generator=generator
            )
            x = batch_erase(x, boxes)  # the erased box is 0: the mean colour
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x
