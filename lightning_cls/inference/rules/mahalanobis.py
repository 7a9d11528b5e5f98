"""``mahalanobis`` (Lee et al. 2018): minus the smallest Mahalanobis distance of the
L2-normalised features to a class mean, under one covariance shared by the classes (fitted on
the training features; single-label models only). No options; its stored state: the class
means and the shared precision matrix."""

from __future__ import annotations

import numpy as np

from lightning_cls.inference.feature_rules import FeatureRule, encode, normalized, one_blas_thread


class Mahalanobis(FeatureRule):
    """``mahalanobis``: minus the smallest class-conditional Mahalanobis distance."""

    name = "mahalanobis"
    params = ("means", "precision")
    arrays = ("means", "precision")

    def fit(self, features, labels, seed=0):
        labels = np.asarray(labels)
        if labels.ndim != 1:
            raise ValueError(
                "reject=mahalanobis fits one Gaussian per class and needs one label per image; "
                "a multi-label model takes reject=knn."
            )
        z = normalized(features)
        classes = np.unique(labels)
        means = np.stack([z[labels == c].mean(0) for c in classes])  # (K, D)
        centred = z - means[np.searchsorted(classes, labels)]
        covariance = centred.T.astype(np.float64) @ centred / len(z)
        precision = np.linalg.pinv(covariance, hermitian=True)
        # a class missing from train gets no mean: never matched
        return {"means": encode(means), "precision": encode(precision)}

    def check_state(self, rule, stored):
        if stored["precision"].shape != (stored["means"].shape[1],) * 2:
            raise ValueError(
                f"reject.precision has shape {list(stored['precision'].shape)} but the class "
                f"means have {stored['means'].shape[1]} features; fit the rule again."
            )
        return {}

    def feature_scores(self, rule, z, stored):
        # float64: the squared distances below are differences of terms ~1e5 times larger (the
        # precision of nearly collinear features is large), which float32 rounds to ~0.05.
        means = stored["means"].astype(np.float64)
        precision = stored["precision"].astype(np.float64)
        z = z.astype(np.float64)
        with one_blas_thread():
            zp = z @ precision  # (B, D)
            mp = means @ precision  # (K, D)
            distance = (
                (zp * z).sum(1, keepdims=True) - 2 * zp @ means.T + (mp * means).sum(1)[None, :]
            )  # (B, K) squared Mahalanobis distances
        return (-distance.min(axis=1)).astype(np.float32)
