"""Cheap probes for the label check, no network to train: label-free k-means patch features
(Coates, Lee and Ng 2011, "An Analysis of Single-Layer Networks in Unsupervised Feature
Learning": 79.6% on CIFAR-10 with a linear classifier), then either a linear probe out of fold
(``doctor.probe=patches``) or a kNN label vote among the other folds (``doctor.probe=knn``).

The features, as the paper makes them: random 6x6 patches, each normalized for brightness and
contrast, ZCA-whitened; k-means (``CENTROIDS`` centroids, Lloyd's iterations from seeded random
patches); every patch of the image (stride 1) encoded by the triangle activation
``max(0, mean(z) - z_k)`` (z: its distances to the centroids); summed over the four quadrants.
Images are pooled to at most 32x32 first. Seconds for a thousand images on two cores.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from lightning_cls.data.folds import fold_ids

CENTROIDS = 256
PATCH = 6
SAMPLES = 40_000  # patches k-means learns from
MAX_SIDE = 32
NEIGHBOURS = 10


def patch_features(images, seed: int, centroids: int = CENTROIDS) -> torch.Tensor:
    """(N, C, H, W) uint8 -> (N, 4 * centroids) float32, standardized per feature."""
    x = torch.as_tensor(images[0 : len(images)]).float()  # (N, C, H, W) in 0-255
    if max(x.shape[-2:]) > MAX_SIDE:
        x = F.adaptive_avg_pool2d(x, (min(MAX_SIDE, x.shape[-2]), min(MAX_SIDE, x.shape[-1])))
    gen = torch.Generator().manual_seed(seed)
    sample = _patches(x[torch.randint(len(x), (SAMPLES,), generator=gen)], gen)  # (S, D)
    mean, zca = _whitening(sample)
    codebook = _kmeans((sample - mean) @ zca, centroids, gen)  # (K, D)
    parts = []
    for start in range(0, len(x), 128):
        parts.append(_encode(x[start : start + 128], mean, zca, codebook))
    feats = torch.cat(parts)
    return (feats - feats.mean(0)) / (feats.std(0) + 1e-3)


def _normalized(p: torch.Tensor) -> torch.Tensor:
    """Each patch (row) less its mean, over its deviation (Coates et al.: +10 on 0-255)."""
    p = p - p.mean(1, keepdim=True)
    return p / torch.sqrt(p.pow(2).mean(1, keepdim=True) + 10)


def _patches(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One random 6x6 patch of each image: (S, C*36), normalized."""
    n, c, h, w = x.shape
    top = torch.randint(h - PATCH + 1, (n,), generator=gen)
    left = torch.randint(w - PATCH + 1, (n,), generator=gen)
    rows = top[:, None] + torch.arange(PATCH)  # (n, 6)
    cols = left[:, None] + torch.arange(PATCH)
    idx = torch.arange(n)[:, None, None, None]
    chan = torch.arange(c)[None, :, None, None]
    p = x[idx, chan, rows[:, None, :, None], cols[:, None, None, :]]  # (n, C, 6, 6)
    return _normalized(torch.flatten(p, 1))


def _whitening(p: torch.Tensor):
    mean = p.mean(0)
    cov = torch.cov((p - mean).T.double())
    vals, vecs = torch.linalg.eigh(cov)
    zca = vecs @ torch.diag(1 / torch.sqrt(vals.clamp_min(0) + 0.1)) @ vecs.T  # ZCA, eps 0.1
    return mean, zca.float()


def _kmeans(p: torch.Tensor, k: int, gen: torch.Generator, steps: int = 10) -> torch.Tensor:
    centres = p[torch.randperm(len(p), generator=gen)[:k]].clone()  # (K, D)
    for _ in range(steps):
        nearest = torch.cdist(p, centres).argmin(1)  # (S,)
        sums = torch.zeros_like(centres).index_add_(0, nearest, p)
        counts = torch.bincount(nearest, minlength=k).float()[:, None]
        centres = torch.where(counts > 0, sums / counts.clamp_min(1), centres)  # empty: kept
    return centres


def _encode(x: torch.Tensor, mean, zca, codebook) -> torch.Tensor:
    """(n, C, H, W) -> (n, 4K): triangle activations of every patch, summed per quadrant."""
    n, c, h, w = x.shape
    cols = F.unfold(x, PATCH)  # (n, C*36, L)
    gh, gw = h - PATCH + 1, w - PATCH + 1
    p = _normalized(cols.transpose(1, 2).reshape(-1, cols.shape[1]))  # (n*L, D)
    z = torch.cdist((p - mean) @ zca, codebook)  # (n*L, K)
    act = torch.relu(z.mean(1, keepdim=True) - z).reshape(n, gh, gw, -1)  # (n, gh, gw, K)
    mh, mw = gh // 2, gw // 2
    quads = [act[:, :mh, :mw], act[:, :mh, mw:], act[:, mh:, :mw], act[:, mh:, mw:]]
    return torch.cat([q.sum((1, 2)) for q in quads], 1)  # (n, 4K)


def knn_out_of_fold(
    features: torch.Tensor, labels: np.ndarray, num_classes: int, folds: int, seed: int
) -> np.ndarray:
    """(N, K) probabilities: each row's vote among its ``NEIGHBOURS`` nearest rows (cosine)
    of the other folds, weighted by similarity, with one pseudo-vote spread over the classes."""
    x = F.normalize(features, dim=1)
    y = torch.as_tensor(labels, dtype=torch.int64)
    ids = fold_ids(labels, folds, seed)
    probs = np.zeros((len(labels), num_classes), dtype=np.float64)
    for fold in range(folds):
        held = torch.from_numpy(ids == fold)
        sim = x[held] @ x[~held].T  # (h, n)
        top, where = sim.topk(min(NEIGHBOURS, sim.shape[1]), dim=1)
        votes = torch.zeros(len(top), num_classes).scatter_add_(
            1, y[~held][where], torch.exp(top / 0.1)
        )
        votes = votes / votes.sum(1, keepdim=True) + 1 / num_classes
        probs[held.numpy()] = (votes / votes.sum(1, keepdim=True)).double().numpy()
    return probs
