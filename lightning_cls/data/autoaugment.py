"""RandAugment, TrivialAugmentWide, AutoAugment (CIFAR-10 policy) and RandomErasing for a whole
uint8 batch, each sample with its own draw.

The ops are small pure tensor functions ``op(images (N, C, H, W) uint8, magnitudes (N,))``
with torchvision's v2 semantics (``torchvision.transforms.v2._auto_augment``: the same
magnitude tables, signs, nearest-neighbour affine grid with zero fill, PIL's equalize LUT,
blends truncated to uint8). A *plan* draws, for every sample, which op it gets in each slot
and at what magnitude; ``apply_plan`` then runs each op once on the samples that drew it, so a
batch costs at most (ops x slots) kernel calls whatever its size.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

POLICIES = ("randaugment", "trivialaugment", "autoaugment_cifar10")
OPS = (
    "Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
    "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert",
)  # fmt: skip


def _lin(hi: float) -> Callable[[int, int, int], torch.Tensor]:
    return lambda bins, h, w: torch.linspace(0.0, hi, bins)


def _posterize(span: int) -> Callable[[int, int, int], torch.Tensor]:
    return lambda bins, h, w: (8 - (torch.arange(bins) / ((bins - 1) / span))).round().int()


# op -> (magnitudes(bins, height, width) or None, signed): torchvision v2's tables.
_SOLARIZE = (lambda bins, h, w: torch.linspace(1.0, 0.0, bins), False)
_NONE = (None, False)
RANDAUGMENT_SPACE = {
    "Identity": _NONE,
    "ShearX": (_lin(0.3), True),
    "ShearY": (_lin(0.3), True),
    "TranslateX": (lambda bins, h, w: torch.linspace(0.0, 150.0 / 331.0 * w, bins), True),
    "TranslateY": (lambda bins, h, w: torch.linspace(0.0, 150.0 / 331.0 * h, bins), True),
    "Rotate": (_lin(30.0), True),
    **{op: (_lin(0.9), True) for op in ("Brightness", "Color", "Contrast", "Sharpness")},
    "Posterize": (_posterize(4), False),
    "Solarize": _SOLARIZE,
    "AutoContrast": _NONE,
    "Equalize": _NONE,
}
TRIVIALAUGMENT_SPACE = {
    "Identity": _NONE,
    "ShearX": (_lin(0.99), True),
    "ShearY": (_lin(0.99), True),
    "TranslateX": (_lin(32.0), True),
    "TranslateY": (_lin(32.0), True),
    "Rotate": (_lin(135.0), True),
    **{op: (_lin(0.99), True) for op in ("Brightness", "Color", "Contrast", "Sharpness")},
    "Posterize": (_posterize(6), False),
    "Solarize": _SOLARIZE,
    "AutoContrast": _NONE,
    "Equalize": _NONE,
}
AUTOAUGMENT_SPACE = {**RANDAUGMENT_SPACE, "Invert": _NONE}
# AutoAugment's CIFAR-10 sub-policies: ((op, probability, magnitude bin of 10), x 2).
CIFAR10_POLICY = (
    (("Invert", 0.1, None), ("Contrast", 0.2, 6)),
    (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
    (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)),
    (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
    (("AutoContrast", 0.5, None), ("Equalize", 0.9, None)),
    (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
    (("Color", 0.4, 3), ("Brightness", 0.6, 7)),
    (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
    (("Equalize", 0.6, None), ("Equalize", 0.5, None)),
    (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
    (("Color", 0.7, 7), ("TranslateX", 0.5, 8)),
    (("Equalize", 0.3, None), ("AutoContrast", 0.4, None)),
    (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)),
    (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
    (("Solarize", 0.5, 2), ("Invert", 0.0, None)),
    (("Equalize", 0.2, None), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.2, None), ("Equalize", 0.6, None)),
    (("Color", 0.9, 9), ("Equalize", 0.6, None)),
    (("AutoContrast", 0.8, None), ("Solarize", 0.2, 8)),
    (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
    (("Solarize", 0.4, 5), ("AutoContrast", 0.9, None)),
    (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
    (("AutoContrast", 0.9, None), ("Solarize", 0.8, 3)),
    (("Equalize", 0.8, None), ("Invert", 0.1, None)),
    (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None)),
)


# -- geometric ops: torchvision's inverse affine matrix and grid, one matrix per sample ---------
def _affine(images, angle, translate, shear, center) -> torch.Tensor:
    """``F.affine`` (nearest, zero fill) with per-sample (N,) angle, (N, 2) translate/shear
    (degrees) and centre relative to the image centre; torchvision's matrix and grid."""
    n, c, h, w = images.shape  # (N, C, H, W) uint8
    rot, sx, sy = (torch.deg2rad(t.double()) for t in (angle, shear[:, 0], shear[:, 1]))
    cx, cy = center
    tx, ty = translate[:, 0].double(), translate[:, 1].double()
    a = torch.cos(rot - sy) / torch.cos(sy)
    b = -(a * torch.tan(sx) + torch.sin(rot))
    cc = torch.sin(rot - sy) / torch.cos(sy)
    d = torch.cos(rot) - cc * torch.tan(sx)
    m = torch.stack([d, -b, torch.zeros_like(d), -cc, a, torch.zeros_like(d)], 1)  # (N, 6)
    m[:, 2] += cx - m[:, 0] * (cx + tx) - m[:, 1] * (cy + ty)
    m[:, 5] += cy - m[:, 3] * (cx + tx) - m[:, 4] * (cy + ty)
    theta = m.float().view(n, 2, 3).to(images.device)
    base = torch.empty(1, h, w, 3, device=images.device)
    base[..., 0].copy_(torch.linspace((1.0 - w) * 0.5, (w - 1.0) * 0.5, w, device=images.device))
    base[..., 1].copy_(
        torch.linspace((1.0 - h) * 0.5, (h - 1.0) * 0.5, h, device=images.device).unsqueeze_(-1)
    )
    base[..., 2].fill_(1)
    scale = torch.tensor([0.5 * w, 0.5 * h], device=images.device)
    grid = base.view(1, h * w, 3).expand(n, -1, -1).bmm(theta.transpose(1, 2) / scale)
    out = F.grid_sample(
        images.float(), grid.view(n, h, w, 2), "nearest", "zeros", align_corners=False
    )
    return out.round_().to(torch.uint8)  # (N, C, H, W)


def _zeros(m: torch.Tensor) -> torch.Tensor:
    return torch.zeros(len(m), 2, dtype=torch.float64)


def shear_x(images: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    h, w = images.shape[-2:]
    shear = torch.stack([torch.rad2deg(torch.atan(m.double())), torch.zeros(len(m))], 1)
    return _affine(images, torch.zeros(len(m)), _zeros(m), shear, (-0.5 * w, -0.5 * h))


def shear_y(images: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    h, w = images.shape[-2:]
    shear = torch.stack([torch.zeros(len(m)), torch.rad2deg(torch.atan(m.double()))], 1)
    return _affine(images, torch.zeros(len(m)), _zeros(m), shear, (-0.5 * w, -0.5 * h))


def translate_x(images: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    shift = torch.stack([m.double().trunc(), torch.zeros(len(m))], 1)  # int(magnitude) px
    return _affine(images, torch.zeros(len(m)), shift, _zeros(m), (0.0, 0.0))


def translate_y(images: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    shift = torch.stack([torch.zeros(len(m)), m.double().trunc()], 1)
    return _affine(images, torch.zeros(len(m)), shift, _zeros(m), (0.0, 0.0))


def rotate(images: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Counter-clockwise by ``m`` degrees; quarter turns of square images as ``torch.rot90``
    (torchvision's fast path), everything else through the affine grid."""
    out = _affine(images, -m.double(), _zeros(m), _zeros(m), (0.0, 0.0))
    turns = torch.remainder(m.double(), 360.0)
    for k, angle in ((0, 0.0), (2, 180.0)) + (((1, 90.0), (3, 270.0)) if _square(images) else ()):
        hit = (turns == angle).to(images.device)
        if hit.any():
            out[hit] = torch.rot90(images[hit], k, dims=(-2, -1))
    return out


def _square(images: torch.Tensor) -> bool:
    return images.shape[-1] == images.shape[-2]


# -- colour ops -------------------------------------------------------------------------------
def _factor(m: torch.Tensor, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ratio, 1 - ratio) as float32 (N, 1, 1, 1), each rounded once from float64."""
    r = 1.0 + m.double()
    shape = (-1, 1, 1, 1)
    return r.float().view(shape).to(device), (1.0 - r).float().view(shape).to(device)


def _blend(images: torch.Tensor, other: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    r, one_minus_r = _factor(m, images.device)
    return (images.float() * r + other * one_minus_r).clamp_(0, 255).to(torch.uint8)


def _gray(images: torch.Tensor) -> torch.Tensor:
    """(N, 1, H, W) float luma, floored as torchvision's uint8 path."""
    r, g, b = images.unbind(1)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(1).floor_()


def brightness(images: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    r, _ = _factor(m, images.device)
    return (images.float() * r).clamp_(0, 255).to(torch.uint8)


def color(images: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return images if images.shape[1] == 1 else _blend(images, _gray(images), m)


def contrast(images: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    gray = _gray(images) if images.shape[1] == 3 else images.float()
    return _blend(images, gray.mean(dim=(-3, -2, -1), keepdim=True), m)


def sharpness(images: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Blend with a 3x3 smoothed copy (1s around a 5, / 13); the border pixels stay."""
    n, c, h, w = images.shape
    if h <= 2 or w <= 2:
        return images
    kernel = torch.tensor([[1.0, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]]) / 13.0
    kernel = kernel.to(images.device).expand(c, 1, 3, 3)
    out = images.float()
    blurred = F.conv2d(out, kernel, groups=c).round_()  # (N, C, H-2, W-2)
    view = out[..., 1:-1, 1:-1]
    _, one_minus_r = _factor(m, images.device)
    view.add_(blurred.sub_(view).mul_(one_minus_r))
    return out.clamp_(0, 255).to(torch.uint8)


def posterize(images: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    bits = m.long().clamp(0, 8)
    mask = ((1 << bits) - 1) << (8 - bits)  # (N,) keep the top ``bits`` bits
    return images & mask.to(torch.uint8).view(-1, 1, 1, 1).to(images.device)


def solarize(images: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    threshold = (255.0 * m.double()).float().view(-1, 1, 1, 1).to(images.device)
    return torch.where(images.float() >= threshold, 255 - images, images)


def autocontrast(images: torch.Tensor, m: torch.Tensor | None = None) -> torch.Tensor:
    x = images.float()
    lo, hi = x.amin(dim=(-2, -1), keepdim=True), x.amax(dim=(-2, -1), keepdim=True)
    flat = hi == lo
    inv_scale = (hi - lo).mul_(1.0 / 255)
    lo[flat], inv_scale[flat] = 0.0, 1.0
    return x.sub_(lo).div_(inv_scale).clamp_(0, 255).to(torch.uint8)


def equalize(images: torch.Tensor, m: torch.Tensor | None = None) -> torch.Tensor:
    """Per image and channel, PIL's equalize LUT (as torchvision's ``equalize_image``)."""
    flat = images.flatten(-2).long()  # (N, C, H*W)
    hist = torch.zeros(*flat.shape[:-1], 256, dtype=torch.int32, device=images.device)
    hist.scatter_add_(-1, flat, torch.ones_like(flat, dtype=torch.int32))
    cum = hist.cumsum(-1)
    last = cum.argmax(-1, keepdim=True)  # the largest value present
    step = (flat.shape[-1] - hist.gather(-1, last)).div(255, rounding_mode="floor")
    lut = (cum[..., :-1] + step // 2).div(step.clamp(min=1), rounding_mode="floor").clamp(0, 255)
    lut = torch.cat([torch.zeros_like(lut[..., :1]), lut], -1).to(torch.uint8)  # (N, C, 256)
    out = lut.gather(-1, flat).view_as(images)
    return torch.where((step != 0).unsqueeze(-1), out, images)


def invert(images: torch.Tensor, m: torch.Tensor | None = None) -> torch.Tensor:
    return images.bitwise_not()


def identity(images: torch.Tensor, m: torch.Tensor | None = None) -> torch.Tensor:
    return images


OP_FUNCTIONS = dict(
    zip(
        OPS,
        (identity, shear_x, shear_y, translate_x, translate_y, rotate, brightness, color,
         contrast, sharpness, posterize, solarize, autocontrast, equalize, invert),
    )
)  # fmt: skip


# -- plans: which op and magnitude each sample gets, slot by slot -----------------------------
Plan = list[tuple[torch.Tensor, torch.Tensor]]  # per slot: (N,) op index into OPS, (N,) magnitude


def _table(
    space: dict, bins: int, h: int, w: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(K,) op indices, (K, bins) float64 magnitudes (0 where none), (K,) signed flags."""
    ids = torch.tensor([OPS.index(op) for op in space])
    mags = torch.stack(
        [
            fn(bins, h, w).double() if fn is not None else torch.zeros(bins, dtype=torch.float64)
            for fn, _ in space.values()
        ]
    )
    return ids, mags, torch.tensor([signed for _, signed in space.values()])


def _signs(n: int, generator) -> torch.Tensor:
    return torch.where(torch.rand(n, generator=generator) <= 0.5, -1.0, 1.0).double()


def randaugment_plan(n, h, w, num_ops=2, magnitude=9, bins=31, generator=None) -> Plan:
    """``RandAugment(num_ops, magnitude, bins)``: each slot a uniform op at the fixed bin."""
    if not 0 <= magnitude < bins:
        raise ValueError(f"RandAugment magnitude must be in [0, {bins - 1}], got {magnitude}.")
    ids, mags, signed = _table(RANDAUGMENT_SPACE, bins, h, w)
    plan = []
    for _ in range(num_ops):
        k = torch.randint(len(ids), (n,), generator=generator)
        sign = torch.where(signed[k], _signs(n, generator), 1.0)
        plan.append((ids[k], mags[k, magnitude] * sign))
    return plan


def trivialaugment_plan(n, h, w, bins=31, generator=None) -> Plan:
    """``TrivialAugmentWide(bins)``: one uniform op at a uniform bin."""
    ids, mags, signed = _table(TRIVIALAUGMENT_SPACE, bins, h, w)
    k = torch.randint(len(ids), (n,), generator=generator)
    level = torch.randint(bins, (n,), generator=generator)
    sign = torch.where(signed[k], _signs(n, generator), 1.0)
    return [(ids[k], mags[k, level] * sign)]


def autoaugment_cifar10_plan(n, h, w, generator=None) -> Plan:
    """``AutoAugment(CIFAR10)``: a uniform sub-policy; each of its two ops applied with its
    probability (else Identity), at its bin of 10, signed ops with a random sign."""
    space = {op: AUTOAUGMENT_SPACE[op] for op in OPS[1:]}
    _, mags, signed = _table(space, 10, h, w)
    policy = torch.randint(len(CIFAR10_POLICY), (n,), generator=generator)
    plan = []
    for slot in range(2):
        row = [CIFAR10_POLICY[p][slot] for p in range(len(CIFAR10_POLICY))]
        op = torch.tensor([OPS.index(o) for o, _, _ in row])[policy]  # (N,)
        prob = torch.tensor([p for _, p, _ in row], dtype=torch.float64)[policy]
        level = torch.tensor([lv or 0 for _, _, lv in row])[policy]
        apply = torch.rand(n, generator=generator, dtype=torch.float64) <= prob
        sign = torch.where(signed[op - 1], _signs(n, generator), 1.0)
        mag = mags[op - 1, level] * sign
        plan.append((torch.where(apply, op, 0), torch.where(apply, mag, 0.0)))
    return plan


def make_plan(policy: str, n: int, h: int, w: int, generator=None) -> Plan:
    if policy == "randaugment":
        return randaugment_plan(n, h, w, generator=generator)
    if policy == "trivialaugment":
        return trivialaugment_plan(n, h, w, generator=generator)
    if policy == "autoaugment_cifar10":
        return autoaugment_cifar10_plan(n, h, w, generator=generator)
    raise ValueError(
        f"Unknown augment.auto_augment={policy!r}; use one of {', '.join(POLICIES)} or null."
    )


def apply_plan(images: torch.Tensor, plan: Plan) -> torch.Tensor:
    """Run each slot's ops on the samples that drew them (one call per op present)."""
    for ops, magnitudes in plan:
        out = images.clone()
        for k in ops.unique().tolist():
            if OPS[k] == "Identity":
                continue
            idx = (ops == k).nonzero().squeeze(1)  # (n_k,)
            out[idx.to(images.device)] = OP_FUNCTIONS[OPS[k]](
                images[idx.to(images.device)], magnitudes[idx]
            )
        images = out
    return images  # (N, C, H, W) uint8


def auto_augment(
    images: torch.Tensor, policy: str, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``policy`` (one of ``POLICIES``) on every sample of a uint8 batch, each its own draw."""
    n, _, h, w = images.shape
    return apply_plan(images, make_plan(policy, n, h, w, generator))


# -- RandomErasing ---------------------------------------------------------------------------
def random_erasing_params(
    n: int,
    h: int,
    w: int,
    p: float = 0.5,
    scale: tuple[float, float] = (0.02, 0.33),
    ratio: tuple[float, float] = (0.3, 3.3),
    generator: torch.Generator | None = None,
    attempts: int = 10,
) -> torch.Tensor:
    """(N, 4) int64 boxes (top, left, h, w) as ``RandomErasing(p, scale, ratio)`` draws them;
    h = w = 0 where nothing is erased (not drawn with ``p``, or no attempt fitted)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"augment.random_erasing={p} must be a probability in [0, 1].")
    chosen = torch.rand(n, generator=generator, dtype=torch.float64) < p
    u_area, u_ratio, u_top, u_left = (
        torch.rand(n, attempts, generator=generator, dtype=torch.float64) for _ in range(4)
    )
    area = h * w * (scale[0] + (scale[1] - scale[0]) * u_area)  # (N, A)
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = torch.exp(lo + (hi - lo) * u_ratio)
    eh = torch.round(torch.sqrt(area * aspect)).long()
    ew = torch.round(torch.sqrt(area / aspect)).long()
    fits = (eh < h) & (ew < w)  # (N, A)
    top = (u_top * (h - eh + 1)).long()
    left = (u_left * (w - ew + 1)).long()
    first = fits.long().argmax(1, keepdim=True)
    boxes = torch.cat([t.gather(1, first) for t in (top, left, eh, ew)], 1)  # (N, 4)
    keep = (chosen & fits.any(1))[:, None]
    return torch.where(keep, boxes, torch.zeros_like(boxes))


def batch_erase(x: torch.Tensor, boxes: torch.Tensor, value: float = 0.0) -> torch.Tensor:
    """Set each sample's (top, left, h, w) box to ``value`` (after normalisation 0 is the mean
    colour, as torchvision's references erase normalised tensors)."""
    top, left, bh, bw = (t.to(x.device).view(-1, 1, 1) for t in boxes.unbind(1))
    rows = torch.arange(x.shape[-2], device=x.device).view(1, -1, 1)
    cols = torch.arange(x.shape[-1], device=x.device).view(1, 1, -1)
    inside = (rows >= top) & (rows < top + bh) & (cols >= left) & (cols < left + bw)  # (N, H, W)
    return x.masked_fill(inside[:, None], value)  # (N, C, H, W)
