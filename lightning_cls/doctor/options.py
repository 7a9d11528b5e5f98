"""``DoctorOptions``: the data check's settings (``doctor.*`` in conf/doctor.yaml), and the
one place that refuses a bad one, in one line naming the key, the value and the fix, before
any image is read."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from lightning_cls.doctor import duplicates as dup
from lightning_cls.doctor.index import dropped_rows
from lightning_cls.doctor.probes import check_probe_name, probe_parts

# Numeric options: whole numbers, or any number (a YAML string like `abc` is refused by name).
WHOLE = ("folds", "probe_epochs", "near_distance", "mosaic_limit")
REAL = ("min_self_test_recall", "plant_noise", "size_factor", "imbalance_ratio")


@dataclass
class DoctorOptions:
    probe: str = "kfold"  # kfold|pixels|embedding|patches|knn|auto, or a mean: kfold+patches
    probe_epochs: int = 10  # kfold: epochs each fold's network trains
    folds: int = 5  # out-of-fold probabilities for the label check
    min_self_test_recall: float = 0.5  # below it, label findings are shown but not trusted
    min_probe_accuracy: float | None = None  # deprecated (capped by the noise); also required
    features_from: str | None = None  # probe=embedding: a .ckpt/model_weights.pt
    plant_noise: float = 0.0  # move this share of labels first, to measure the check
    near_distance: int = 4  # bits of the 64-bit perceptual hash that near duplicates may differ
    size_factor: float = 4.0  # "far smaller/larger": linear size this many times the median's
    imbalance_ratio: float = 3.0  # train max/min class count from which to suggest weights
    label_errors: bool = True
    duplicates: bool = True
    mosaic_limit: int = 32  # most groups/images per mosaic
    write_index: str | None = None  # a cleaned index CSV (file-backed data only)
    drop: tuple[str, ...] = ("duplicates", "label_issues")  # what the cleaned index leaves out
    seed: int = 0

    def check(self) -> None:
        """Refuse a bad setting before any check runs (a bad path must not cost a full scan)."""
        self._check_numbers()
        check_probe_name(self.probe)
        if self.folds < 2:
            raise ValueError(f"doctor.folds={self.folds} must be an integer >= 2 (e.g. 5).")
        if self.probe_epochs < 1:
            raise ValueError(
                f"doctor.probe_epochs={self.probe_epochs} must be a whole number >= 1 (e.g. 10)."
            )
        if not 0 <= self.near_distance < dup.HASH_BITS // 2:
            dup.near_pairs(np.zeros(0, dtype=np.uint64), self.near_distance)  # its message
        if not 0 <= self.min_self_test_recall <= 1:
            raise ValueError(
                f"doctor.min_self_test_recall={self.min_self_test_recall} must be a share in "
                "[0, 1] (e.g. 0.5: half the planted flips found)."
            )
        if self.size_factor <= 1:
            raise ValueError(f"doctor.size_factor={self.size_factor} must be > 1 (e.g. 4).")
        if not 0 <= self.plant_noise < 1:
            raise ValueError(
                f"doctor.plant_noise={self.plant_noise} must be a share in [0, 1) (e.g. 0.1 "
                "moves 10% of the labels; 0 plants none)."
            )
        if self.plant_noise and self.write_index:
            raise ValueError(
                f"doctor.plant_noise={self.plant_noise} measures the check on moved labels, so "
                "its findings must not clean an index; drop doctor.write_index or set "
                "doctor.plant_noise=0."
            )
        dropped_rows({"duplicates": [], "label_issues": []}, self.drop)  # names unknown entries
        self._check_features_from()

    def _check_numbers(self) -> None:
        defaults = {f.name: f.default for f in fields(self)}
        for key in WHOLE + REAL + ("min_probe_accuracy",):
            value = getattr(self, key)
            if key == "min_probe_accuracy" and value is None:
                continue
            kinds = (int,) if key in WHOLE else (int, float)
            if isinstance(value, bool) or not isinstance(value, kinds):
                kind = "a whole number" if key in WHOLE else "a number"
                raise TypeError(
                    f"doctor.{key}={value!r} is not {kind}; set doctor.{key} to {kind} "
                    f"(its default is doctor.{key}={defaults[key]})."
                )

    def _check_features_from(self) -> None:
        embedding = "embedding" in probe_parts(self.probe)
        if embedding and self.features_from is None:
            raise ValueError(
                "doctor.probe=embedding needs doctor.features_from=<.ckpt or model_weights.pt> "
                "(the network whose embeddings it fits), or use doctor.probe=kfold."
            )
        if not embedding and self.features_from is not None:
            raise ValueError(
                f"doctor.features_from={self.features_from} is read only by the embedding "
                f"probe and doctor.probe={self.probe}; add doctor.probe=embedding, or drop "
                "doctor.features_from."
            )
        if self.features_from is not None and not Path(self.features_from).is_file():
            raise FileNotFoundError(
                f"doctor.features_from={self.features_from} not found; pass a .ckpt or "
                "model_weights.pt file, or use doctor.probe=kfold."
            )

    def check_folds(self, images: int) -> None:
        """Once the data is read (before any check runs): at most one fold per image."""
        if self.label_errors and self.folds > images:
            raise ValueError(
                f"doctor.folds={self.folds} is more than the {images} images the label check "
                f"splits into folds; set doctor.folds to at most {images} (e.g. 5)."
            )
