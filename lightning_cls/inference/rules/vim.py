"""``vim`` (Wang et al. 2022, "ViM: Out-Of-Distribution with Virtual-logit Matching"): the
energy of the logits minus a virtual logit, ``alpha`` times the norm of the penultimate
features' part outside the training features' principal subspace (``h - u`` with the origin
``u = -pinv(W) b``). ``alpha`` matches the virtual logit's mean to the largest logit's on the
training images. Its option (``conf/reject/vim.yaml``): ``dim``, the principal subspace's
dimension (null: the paper's choice by the feature width D: 1000 from D >= 1500, 512 from
D >= 768, else D / 2); its stored state: the origin, the residual subspace's basis, ``alpha``
and the last linear layer (``feature_rules.HeadRule``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lightning_cls.inference import trust
from lightning_cls.inference.feature_rules import HeadRule, encode, one_blas_thread


def check_dim(dim: Any, width: int | None = None) -> int | None:
    """``reject.dim``: None (auto) or an integer >= 1 below the feature width (``width``,
    once known); a ``ValueError`` otherwise."""
    if dim is None:
        return None
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ValueError(
            f"reject.dim={dim!r} is not an integer >= 1 or null; ViM's principal subspace "
            "dimension (null: chosen by the feature width, as the paper does)."
        )
    if width is not None and dim >= width:
        raise ValueError(
            f"reject.dim={dim} leaves no residual: the penultimate features have {width} "
            f"dimensions; give reject.dim<{width}, or reject.dim=null (auto)."
        )
    return dim


def auto_dim(width: int) -> int:
    """The paper's principal dimension for features of ``width``."""
    return 1000 if width >= 1500 else 512 if width >= 768 else max(1, width // 2)


class VirtualLogit(HeadRule):
    """``vim``: higher = more familiar."""

    name = "vim"
    params = ("weight", "bias", "dim", "origin", "residual", "alpha")
    arrays = ("weight", "bias", "origin", "residual")

    def __init__(self, dim: int | None = None):
        self.dim = check_dim(dim)

    def fit_head(self, h, logits, weight, bias, task):
        width = h.shape[1]
        dim = check_dim(self.dim, width) or auto_dim(width)
        origin = -np.linalg.pinv(weight.astype(np.float64)) @ bias.astype(np.float64)
        centred = h - origin
        values, vectors = np.linalg.eigh(centred.T @ centred / len(h))
        residual = vectors[:, np.argsort(values)[::-1][dim:]]  # (D, D - dim)
        norm = np.linalg.norm(centred @ residual, axis=1).mean()
        if not norm > 0:
            raise ValueError(
                f"reject=vim: the training features have no part outside a {dim}-dimensional "
                f"subspace (fewer images than dimensions?); give a smaller reject.dim."
            )
        top = np.asarray(trust.scaled(logits, task.temperature), np.float64).max(1).mean()
        return {
            "dim": dim,
            "origin": encode(origin),
            "residual": encode(residual),
            "alpha": float(top / norm),
        }

    def check_state(self, rule, stored):
        width = stored["weight"].shape[1]
        residual, alpha = stored["residual"], rule["alpha"]
        if stored["origin"].shape != (width,) or residual.ndim != 2 or len(residual) != width:
            raise ValueError(
                f"reject.origin {list(stored['origin'].shape)} and reject.residual "
                f"{list(residual.shape)} do not fit features of {width}; fit the rule again."
            )
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise ValueError(f"reject.alpha={alpha!r} is not a number; fit the rule again.")
        if not math.isfinite(alpha):
            raise ValueError(f"reject.alpha={alpha!r} is not finite; fit the rule again.")
        return {
            **super().check_state(rule, stored),
            "dim": check_dim(rule["dim"], width),
            "alpha": float(alpha),
        }

    def head_scores(self, task, rule, stored, h, logits):
        residual = stored["residual"].astype(np.float64)
        with one_blas_thread():
            outside = np.linalg.norm((h - stored["origin"]) @ residual, axis=1)  # (B,)
        return task.energy(logits) - np.float32(rule["alpha"]) * outside.astype(np.float32)
