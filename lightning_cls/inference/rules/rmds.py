"""``rmds`` (relative Mahalanobis distance, Ren et al. 2021): minus (the smallest class
Mahalanobis distance of the L2-normalised features, minus their distance to one Gaussian of
all the training features): what sets an image apart from the classes beyond what sets it apart
from the data as a whole. No options; its stored state: the ``mahalanobis`` rule's class means
and precision, and the background's mean and precision."""

from __future__ import annotations

import numpy as np

from lightning_cls.inference.feature_rules import FeatureRule
from lightning_cls.inference.rules.mahalanobis import Mahalanobis


class RelativeMahalanobis(FeatureRule):
    """``rmds``: higher = more familiar."""

    name = "rmds"
    params = ("means", "precision", "background_mean", "background_precision")
    arrays = params

    def fit(self, features, labels, seed=0):
        labels = np.asarray(labels)
        classes = Mahalanobis().fit(features, labels)
        background = Mahalanobis().fit(features, np.zeros(len(features), int))
        return {
            **classes,
            "background_mean": background["means"],
            "background_precision": background["precision"],
        }

    def check_state(self, rule, stored):
        for mean, precision in (
            ("means", "precision"),
            ("background_mean", "background_precision"),
        ):
            Mahalanobis().check_state(rule, {"means": stored[mean], "precision": stored[precision]})
        return {}

    def feature_scores(self, rule, z, stored):
        distance = Mahalanobis().feature_scores
        background = {
            "means": stored["background_mean"],
            "precision": stored["background_precision"],
        }
        return (distance(rule, z, stored) - distance(rule, z, background)).astype(np.float32)
