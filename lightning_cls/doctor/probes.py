"""Out-of-fold probabilities for the label check: one interface, three probes.

Every probe answers ``probabilities(images, labels, num_classes, folds, seed)``: (N, K), each
row from a model fitted on the other folds of the project's stratified k-fold
(``data/folds.fold_ids``), so no image is scored by a model that saw its label (cleanlab's
requirement: in-sample probabilities would have memorized the wrong labels).

- ``kfold`` (``doctor/kfold.py``, the default): the configured network, trained with its
  recipe on k-1 folds. The network's own view of the data; costs k trainings.
- ``pixels``: softmax regression on the pixels average-pooled to at most 16x16 and
  standardized. Seconds for tens of thousands of images, deterministic (full-batch L-BFGS
  from zeros), no checkpoint; separates the classes of small, centred images (digits: ~91%
  out of fold) but not photos (CIFAR-10: ~37%).
- ``embedding``: the same regression on a trained network's embeddings
  (``doctor.features_from``): the input of its last ``nn.Linear``.
- ``patches`` / ``knn`` (``doctor/patches.py``): label-free k-means patch features (Coates et
  al. 2011), then the same regression or a kNN vote among the other folds; seconds to a
  minute, no checkpoint. ``auto`` runs both and keeps the one whose self-test
  (``doctor/selftest.py``) finds more of its planted flips.
- ``kfold+patches`` (any two or more names joined by ``+``, ``MeanProbe``): the mean of their
  out-of-fold probabilities. Two probes that err differently (a network's view and the
  patches') rank better together than either alone (measured on a small folder of CIFAR-10
  photos: docs/guides/data-check.md).
"""

from __future__ import annotations

import difflib

import numpy as np
import torch
import torch.nn.functional as F

from lightning_cls.data.folds import fold_ids
from lightning_cls.doctor import patches

PROBES = ("auto", "embedding", "kfold", "knn", "patches", "pixels")
MAX_SIDE = 16  # pixel features: each image pooled to at most this many pixels a side


def probe_parts(name) -> list[str]:
    """The probes ``doctor.probe`` names: one, or several joined by ``+`` (their mean)."""
    return str(name).split("+")


def check_probe_name(name) -> None:
    """Refuse an unknown ``doctor.probe`` (or part of a ``+`` mean), naming the closest known
    one; a mean takes two or more different probes, ``auto`` not among them."""
    parts = probe_parts(name)
    for part in parts:
        if part not in PROBES:
            close = difflib.get_close_matches(part, PROBES, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            where = f"doctor.probe={name!r}"
            if len(parts) > 1:
                where = f"{part!r} in {where}"
            raise ValueError(
                f"Unknown {where}.{hint} Known: {', '.join(PROBES)} (or two or more joined by "
                "'+', e.g. kfold+patches)."
            )
    if len(parts) > 1 and ("auto" in parts or len(set(parts)) < len(parts)):
        raise ValueError(
            f"doctor.probe={name!r}: a mean of probes joins two or more different ones, "
            "'auto' not among them (e.g. doctor.probe=kfold+patches)."
        )


class PixelProbe:
    """The linear probe on pooled pixels."""

    name = "pixels"

    def describe(self) -> str:
        return "pixels"

    def probabilities(self, images, labels, num_classes: int, folds: int, seed: int):
        return linear_out_of_fold(pixel_features(images), labels, num_classes, folds, seed)


class EmbeddingProbe:
    """The linear probe on the embeddings of the network in ``features_from``."""

    name = "embedding"

    def __init__(self, features_from: str):
        self.features_from = features_from

    def describe(self) -> str:
        return self.features_from

    def probabilities(self, images, labels, num_classes: int, folds: int, seed: int):
        from lightning_cls.inference.torch_models import load_torch_model

        net, spec = load_torch_model(self.features_from)
        where = f"doctor.features_from={self.features_from}"
        features = network_features(net.eval(), spec, images, where)
        return linear_out_of_fold(features, labels, num_classes, folds, seed)


class PatchProbe:
    """The linear probe on k-means patch features. ``memo``: features shared with a
    ``KnnProbe`` on the same images (``doctor.probe=auto`` computes them once)."""

    name = "patches"

    def __init__(self, memo: dict | None = None):
        self.memo = {} if memo is None else memo

    def describe(self) -> str:
        return f"k-means patch features ({patches.CENTROIDS} centroids), linear"

    def features(self, images, seed: int) -> torch.Tensor:
        if seed not in self.memo:
            self.memo[seed] = patches.patch_features(images, seed)
        return self.memo[seed]

    def probabilities(self, images, labels, num_classes: int, folds: int, seed: int):
        feats = self.features(images, seed)
        return linear_out_of_fold(feats, labels, num_classes, folds, seed, weight_decay=0.1)


class KnnProbe(PatchProbe):
    """A kNN label vote on k-means patch features, among the other folds' images."""

    name = "knn"

    def describe(self) -> str:
        return f"k-means patch features ({patches.CENTROIDS} centroids), {patches.NEIGHBOURS}-NN"

    def probabilities(self, images, labels, num_classes: int, folds: int, seed: int):
        feats = self.features(images, seed)
        return patches.knn_out_of_fold(feats, labels, num_classes, folds, seed)


# The probes on k-means patch features, by name: what doctor.probe=auto chooses among, sharing
# one memo of the features.
CHEAP = {probe.name: probe for probe in (PatchProbe, KnnProbe)}


class MeanProbe:
    """The mean of several probes' out-of-fold probabilities (``doctor.probe=kfold+patches``).
    Each row's parts all come from models that never saw its label, so the mean did not
    either."""

    def __init__(self, parts: list):
        self.parts = parts
        self.name = "+".join(p.name for p in parts)

    def describe(self) -> str:
        return "mean of " + "; ".join(f"{p.name} ({p.describe()})" for p in self.parts)

    def probabilities(self, images, labels, num_classes: int, folds: int, seed: int):
        probs = [p.probabilities(images, labels, num_classes, folds, seed) for p in self.parts]
        return np.mean(probs, axis=0)


def pixel_features(images) -> torch.Tensor:
    """(N, C, H, W) uint8 -> (N, D) float32 pooled pixels, standardized per feature."""
    parts = []
    for start in range(0, len(images), 4096):
        x = torch.as_tensor(images[start : start + 4096]).float() / 255  # (n, C, H, W)
        side = min(MAX_SIDE, x.shape[-1]), min(MAX_SIDE, x.shape[-2])
        parts.append(torch.flatten(F.adaptive_avg_pool2d(x, side[::-1]), 1))  # (n, D)
    return _standardized(torch.cat(parts))


def network_features(net: torch.nn.Module, spec, images, where: str) -> torch.Tensor:
    """(N, D) standardized embeddings: the input of ``net``'s last ``nn.Linear`` (its head)
    for each image, resized to the network's side and normalized as it was trained."""
    heads = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    if not heads:
        raise ValueError(f"{where} has no nn.Linear head to take embeddings from; use a "
                         "checkpoint of a network that ends in one, or doctor.probe=kfold.")  # fmt: skip
    if images.shape[1] != spec.num_channels:
        raise ValueError(
            f"{where} takes {spec.num_channels}-channel images and the data has "
            f"{images.shape[1]}; use a checkpoint trained on images like these."
        )
    grabbed: list[torch.Tensor] = []
    hook = heads[-1].register_forward_pre_hook(lambda _, args: grabbed.append(args[0].flatten(1)))
    try:
        with torch.inference_mode():
            for start in range(0, len(images), 256):
                x = spec.preprocess(torch.as_tensor(images[start : start + 256]))  # (b, C, H, W)
                if x.shape[-1] != spec.image_size:
                    x = F.interpolate(x, size=spec.image_size, mode="bilinear", antialias=True)
                net(x)
    finally:
        hook.remove()
    return _standardized(torch.cat(grabbed).float())


def _standardized(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean(0)) / (x.std(0) + 1e-3)


def fit_linear(x: torch.Tensor, y: torch.Tensor, num_classes: int, weight_decay: float):
    """Softmax regression by full-batch L-BFGS; returns the fitted ``nn.Linear``."""
    linear = torch.nn.Linear(x.shape[1], num_classes)
    torch.nn.init.zeros_(linear.weight), torch.nn.init.zeros_(linear.bias)  # deterministic
    opt = torch.optim.LBFGS(
        linear.parameters(), lr=1, max_iter=100, history_size=10, line_search_fn="strong_wolfe"
    )

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(linear(x), y) + weight_decay * linear.weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return linear


def linear_out_of_fold(
    features: torch.Tensor,
    labels: np.ndarray,
    num_classes: int,
    folds: int,
    seed: int,
    weight_decay: float = 1e-2,
) -> np.ndarray:
    """(N, K) probabilities, each row from the linear probe fitted on the other folds."""
    x, y = features, torch.as_tensor(labels, dtype=torch.int64)
    ids = fold_ids(labels, folds, seed)
    probs = np.zeros((len(labels), num_classes), dtype=np.float64)
    for fold in range(folds):
        held = torch.from_numpy(ids == fold)
        with torch.enable_grad():
            probe = fit_linear(x[~held], y[~held], num_classes, weight_decay)
        with torch.no_grad():
            probs[held.numpy()] = torch.softmax(probe(x[held]), 1).double().numpy()
    return probs
