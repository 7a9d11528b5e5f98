"""``knn`` (Sun et al. 2022, "Out-of-Distribution Detection with Deep Nearest Neighbors"): the
cosine similarity of the L2-normalised features to their ``k``-th nearest neighbour in a bank
of normalised training features (a class-balanced subsample of at most ``bank`` images, stored
as float16). Its options (``conf/reject/knn.yaml``): ``k`` and ``bank``; its stored state:
``k`` and the bank."""

from __future__ import annotations

from typing import Any

import numpy as np

from lightning_cls.inference.feature_rules import (
    FeatureRule,
    balanced_subsample,
    encode,
    normalized,
    one_blas_thread,
)

DEFAULT_K = 50
DEFAULT_BANK = 5000
# The flat command-line keys its options once were -> their spelling now (``cli/renamed.py``
# rewrites them before Hydra composes, with a warning).
RENAMED = {"reject_k": "reject.k", "reject_bank": "reject.bank"}


def check_k(k: Any, bank_size: int | None = None) -> int:
    """``reject.k``: an integer >= 1, at most the bank's size; a ``ValueError`` otherwise."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(
            f"reject.k={k!r} is not an integer >= 1; the kNN rule scores the distance to the "
            f"k-th nearest training feature (e.g. reject.k={DEFAULT_K})."
        )
    if bank_size is not None and k > bank_size:
        raise ValueError(
            f"reject.k={k} is larger than the feature bank ({bank_size} training images); "
            f"give reject.k<={bank_size}, or a larger reject.bank."
        )
    return k


def check_bank(size: Any) -> int:
    """``reject.bank``: an integer >= 1; a ``ValueError`` otherwise."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(
            f"reject.bank={size!r} is not an integer >= 1: the number of training images whose "
            f"features the kNN rule keeps (e.g. reject.bank={DEFAULT_BANK})."
        )
    return size


class KNearest(FeatureRule):
    """``knn``: the cosine similarity to the ``k``-th nearest training feature."""

    name = "knn"
    params = ("k", "bank")
    arrays = ("bank",)

    def __init__(self, k: int = DEFAULT_K, bank: int = DEFAULT_BANK):
        self.k, self.bank = check_k(k, check_bank(bank)), bank

    def check_options(self, images=None):
        check_k(self.k, self.bank if images is None else min(self.bank, images))

    def fit(self, features, labels, seed=0):
        z = normalized(features)
        rows = balanced_subsample(np.asarray(labels), self.bank, seed)
        check_k(self.k, len(rows))
        return {"k": self.k, "bank": encode(z[rows], "float16")}

    def check_state(self, rule, stored):
        return {"k": check_k(rule["k"], len(stored["bank"]))}

    def feature_scores(self, rule, z, stored):
        k = int(rule["k"])
        with one_blas_thread():
            similarity = z @ stored["bank"].T  # (B, M) cosine similarities
        return np.partition(similarity, -k, axis=1)[:, -k].astype(np.float32)
