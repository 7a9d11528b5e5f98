"""The pointing game's data and model: 32x32 grey-noise images with a 6x6 coloured patch at a
random place, and a tiny global-max-pool CNN trained on them in-process (a few seconds).

``patch_images(cue="patch")``: the patch's colour is the class (red, green, blue).
``cue="brightness"``: the class is the background's brightness (dark or bright noise) and the
patch's colour is random: a model of the same shape that looks anywhere but the patch.
``cue="multilabel"``: one or two patches, each colour a label (``multilabel_images``).
"""

from __future__ import annotations

import torch
from torch import nn

from lightning_cls.inference.spec import InputSpec

SIZE, PATCH = 32, 6
COLOURS = torch.tensor([[230, 20, 20], [20, 230, 20], [20, 20, 230]], dtype=torch.uint8)


def patch_images(n: int, cue: str, seed: int):
    """uint8 images (n, 3, 32, 32), labels (n,), patch corners (n, 2) as (top, left)."""
    g = torch.Generator().manual_seed(seed)
    classes = 3 if cue == "patch" else 2
    labels = torch.randint(0, classes, (n,), generator=g)
    if cue == "patch":
        low, colour = torch.zeros(n, dtype=torch.long), labels
    else:
        low, colour = labels * 128, torch.randint(0, 3, (n,), generator=g)
    grey = torch.rand(n, 1, SIZE, SIZE, generator=g) * 127 + low.view(-1, 1, 1, 1)
    images = grey.expand(n, 3, SIZE, SIZE).round().to(torch.uint8).clone()
    corners = torch.randint(0, SIZE - PATCH + 1, (n, 2), generator=g)
    for img, (top, left), c in zip(images, corners.tolist(), colour.tolist()):
        img[:, top : top + PATCH, left : left + PATCH] = COLOURS[c].view(3, 1, 1)
    return images, labels, corners


def multilabel_images(n: int, seed: int, labels_per_image: tuple[int, ...] = (1, 2)):
    """Multi-label: one or two patches of distinct colours, one in the left half and one in
    the right. uint8 images (n, 3, 32, 32), multi-hot (n, 3), corners (n, 3, 2) (-1: absent)."""
    g = torch.Generator().manual_seed(seed)
    images = (torch.rand(n, 1, SIZE, SIZE, generator=g) * 127).round().to(torch.uint8)
    images = images.expand(n, 3, SIZE, SIZE).clone()
    hot, corners = torch.zeros(n, 3), torch.full((n, 3, 2), -1)
    for i in range(n):
        count = labels_per_image[int(torch.randint(len(labels_per_image), (1,), generator=g))]
        for slot, c in enumerate(torch.randperm(3, generator=g)[:count].tolist()):
            top = int(torch.randint(0, SIZE - PATCH + 1, (1,), generator=g))
            left = int(torch.randint(0, SIZE // 2 - PATCH + 1, (1,), generator=g)) + slot * 16
            images[i, :, top : top + PATCH, left : left + PATCH] = COLOURS[c].view(3, 1, 1)
            hot[i, c], corners[i, c] = 1, torch.tensor([top, left])
    return images, hot, corners


def spec_for(cue: str) -> InputSpec:
    classes = ("dark", "bright") if cue == "brightness" else ("red", "green", "blue")
    task = "multilabel" if cue == "multilabel" else "multiclass"
    return InputSpec(
        classes=classes,
        mean=(0.5,) * 3,
        std=(0.25,) * 3,
        image_size=SIZE,
        num_channels=3,
        task=task,
    )


def tiny_cnn(classes: int) -> nn.Module:
    """Three 3x3 convs (one 2x2 max-pool: a 16x16 map), global max-pool, linear head."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.ReLU(),  # "5": the default layer, the map the head pools
        nn.AdaptiveMaxPool2d(1),
        nn.Flatten(1),
        nn.Linear(16, classes),
    )


def train(cue: str, n: int = 384, epochs: int = 6, seed: int = 0) -> tuple[nn.Module, InputSpec]:
    """A tiny CNN fit on ``n`` images of ``cue`` (Adam, batch 32)."""
    torch.manual_seed(seed)
    spec = spec_for(cue)
    if cue == "multilabel":
        images, labels, _ = multilabel_images(n, seed)
        loss = nn.functional.binary_cross_entropy_with_logits
    else:
        images, labels, _ = patch_images(n, cue, seed)
        loss = nn.functional.cross_entropy
    x = spec.preprocess(images)
    net = tiny_cnn(spec.num_classes)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(epochs):
        for i in torch.randperm(n).split(32):
            opt.zero_grad()
            loss(net(x[i]), labels[i]).backward()
            opt.step()
    return net.eval(), spec


def hits(maps: torch.Tensor, corners: torch.Tensor, margin: int) -> torch.Tensor:
    """(N,) bool: each map's peak lies in its patch grown by ``margin`` pixels."""
    flat = maps.flatten(1).argmax(1)
    y, x = flat // maps.shape[-1], flat % maps.shape[-1]
    top, left = corners[:, 0], corners[:, 1]
    inside_y = (y >= top - margin) & (y < top + PATCH + margin)
    inside_x = (x >= left - margin) & (x < left + PATCH + margin)
    return inside_y & inside_x
