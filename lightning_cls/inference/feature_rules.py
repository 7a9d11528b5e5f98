"""Rejection in feature space: how far an image's features lie from the training set's.

Confidence scores computed from the logits (``msp``, ``energy``) fail on inputs that drive the
logits high: on CIFAR-10 photos uniform noise scored as *more* familiar than every real image
(docs/guides/calibration.md). These two rules look at the network's features instead (the
``features`` output every artifact of such a model carries, ``network.FeatureNet``: the input
of its last linear layer and its first convolution's max-pooled responses, each part
L2-normalised):

- ``knn`` (Sun et al. 2022, "Out-of-Distribution Detection with Deep Nearest Neighbors"): the
  cosine similarity of the L2-normalised features to their ``k``-th nearest neighbour in a
  bank of normalised training features (a class-balanced subsample, stored as float16).
  1 - the cosine distance: higher = closer to the training images.
- ``mahalanobis`` (Lee et al. 2018): minus the smallest Mahalanobis distance of the
  L2-normalised features to a class mean, under one covariance shared by the classes (fitted
  on the training features; single-label models only).

Every rule's score is "higher = more familiar"; the threshold is the one that keeps
``reject_keep`` of the validation images, as for the logit scores. The fitted parameters are
plain arrays stored in the rejection rule (base64 inside the spec), so ONNX and OpenVINO
predict/serve compute the score with numpy: no torch import here.
"""

from __future__ import annotations

import base64
import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from lightning_cls.inference import arrays
from lightning_cls.inference.reject_rules import RejectRule

FEATURE_RULES = ("knn", "mahalanobis")
OUTPUT_NAME = "features"  # the second named output of an exported model with such a rule
DEFAULT_K = 50
DEFAULT_BANK = 5000
# The rule's stored arrays: the kNN bank; the class means and the shared precision matrix.
ARRAY_KEYS = {"knn": ("bank",), "mahalanobis": ("means", "precision")}
PARAM_KEYS = {"knn": ("k", "bank"), "mahalanobis": ("means", "precision")}


def encode(array: np.ndarray, dtype: str = "float32") -> dict[str, Any]:
    """A JSON-able ``{"dtype", "shape", "data"}`` (``data``: the C-order bytes in base64)."""
    array = np.ascontiguousarray(array, dtype=dtype)
    return {
        "dtype": dtype,
        "shape": list(array.shape),
        "data": base64.b64encode(array.tobytes()).decode("ascii"),
    }


def decode(entry: Mapping[str, Any], name: str) -> np.ndarray:
    """The float32 array ``encode`` stored (decoded once per stored string, then cached)."""
    try:
        return _decode(str(entry["dtype"]), tuple(int(d) for d in entry["shape"]), entry["data"])
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(
            f"reject.{name} is not a stored array ({type(err).__name__}: {err}); fit the rule "
            "again (python -m lightning_cls.calibrate reject=...)."
        ) from None


@functools.lru_cache(maxsize=8)
def _decode(dtype: str, shape: tuple[int, ...], data: str) -> np.ndarray:
    if dtype not in ("float16", "float32"):
        raise ValueError(f"dtype {dtype!r} is not float16 or float32")
    array = np.frombuffer(base64.b64decode(data, validate=True), dtype=dtype)
    if array.size != math.prod(shape):
        raise ValueError(f"{array.size} values do not fill the shape {list(shape)}")
    out = array.reshape(shape).astype(np.float32)
    out.setflags(write=False)
    return out


def normalized(features) -> np.ndarray:
    """(N, D) -> float32 rows of unit L2 norm (a zero row stays zero)."""
    x = np.asarray(features, dtype=np.float32).reshape(len(features), -1)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def check_k(k: Any, bank_size: int | None = None) -> int:
    """``reject_k``: an integer >= 1, at most the bank's size; a ``ValueError`` otherwise."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(
            f"reject_k={k!r} is not an integer >= 1; the kNN rule scores the distance to the "
            f"k-th nearest training feature (e.g. reject_k={DEFAULT_K})."
        )
    if bank_size is not None and k > bank_size:
        raise ValueError(
            f"reject_k={k} is larger than the feature bank ({bank_size} training images); "
            f"give reject_k<={bank_size}, or a larger reject_bank."
        )
    return k


def check_bank_size(size: Any) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(
            f"reject_bank={size!r} is not an integer >= 1: the number of training images whose "
            f"features the kNN rule keeps (e.g. reject_bank={DEFAULT_BANK})."
        )
    return size


def balanced_subsample(labels: np.ndarray, size: int, seed: int = 0) -> np.ndarray:
    """Indices of at most ``size`` rows, as equal a share of each class as the data allows
    (multi-hot or no labels: a uniform sample), sorted."""
    n = len(labels)
    if n <= size:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    if labels.ndim != 1:
        return np.sort(rng.choice(n, size, replace=False))
    groups = [rng.permutation(np.flatnonzero(labels == c)) for c in np.unique(labels)]
    picked: list[np.ndarray] = []
    left, remaining = size, sorted(groups, key=len)
    while remaining:  # the smallest classes first: what they cannot fill goes to the others
        share = left // len(remaining)
        group = remaining.pop(0)
        take = group[: min(len(group), share if remaining else left)]
        picked.append(take)
        left -= len(take)
    return np.sort(np.concatenate(picked))


def fit(
    score: str,
    features,
    labels,
    k: int = DEFAULT_K,
    bank_size: int = DEFAULT_BANK,
    seed: int = 0,
) -> dict[str, Any]:
    """The stored parameters of rule ``score`` from training ``features`` (N, D) and
    ``labels`` ((N,) class indices; multi-hot rows for ``knn`` only)."""
    labels = np.asarray(labels)
    z = normalized(features)
    if score == "knn":
        check_bank_size(bank_size)
        rows = balanced_subsample(labels, bank_size, seed)
        check_k(k, len(rows))
        return {"k": k, "bank": encode(z[rows], "float16")}
    if score == "mahalanobis":
        if labels.ndim != 1:
            raise ValueError(
                "reject=mahalanobis fits one Gaussian per class and needs one label per image; "
                "a multi-label model takes reject=knn."
            )
        classes = np.unique(labels)
        means = np.stack([z[labels == c].mean(0) for c in classes])  # (K, D)
        centred = z - means[np.searchsorted(classes, labels)]
        covariance = centred.T.astype(np.float64) @ centred / len(z)
        precision = np.linalg.pinv(covariance, hermitian=True)
        full = np.zeros((int(classes.max()) + 1, z.shape[1]), np.float32)
        full[classes] = means  # a class missing from train gets no mean: never matched
        present = np.zeros(len(full), bool)
        present[classes] = True
        return {"means": encode(full[present]), "precision": encode(precision)}
    raise ValueError(f"reject={score!r} is not a feature-space rule ({', '.join(FEATURE_RULES)}).")


def scores(rule: Mapping[str, Any], features) -> np.ndarray:
    """(B, D) features -> (B,) float32 scores of ``rule`` (``fit``'s parameters): higher =
    more like the training images."""
    z = normalized(_fitted_columns(rule, np.asarray(features)))
    if rule["score"] == "knn":
        bank = decode(rule["bank"], "bank")
        if z.shape[1] != bank.shape[1]:
            raise ValueError(_width_error(z.shape[1], bank.shape[1]))
        k = int(rule["k"])
        with one_blas_thread():
            similarity = z @ bank.T  # (B, M) cosine similarities
        return np.partition(similarity, -k, axis=1)[:, -k].astype(np.float32)
    # float64: the squared distances below are differences of terms ~1e5 times larger (the
    # precision of nearly collinear features is large), which float32 rounds to ~0.05.
    means = decode(rule["means"], "means").astype(np.float64)
    precision = decode(rule["precision"], "precision").astype(np.float64)
    if z.shape[1] != means.shape[1]:
        raise ValueError(_width_error(z.shape[1], means.shape[1]))
    z = z.astype(np.float64)
    with one_blas_thread():
        zp = z @ precision  # (B, D)
        mp = means @ precision  # (K, D)
        distance = (
            (zp * z).sum(1, keepdims=True) - 2 * zp @ means.T + (mp * means).sum(1)[None, :]
        )  # (B, K) squared Mahalanobis distances
    return (-distance.min(axis=1)).astype(np.float32)


def _fitted_columns(rule: Mapping[str, Any], features: np.ndarray) -> np.ndarray:
    """The columns of ``features`` the rule was fitted on. A rule fitted before
    ``network.FeatureNet`` added the first convolution's part (a checkpoint's knn bank of the
    penultimate features alone) is as wide as the penultimate features, which come first (and
    L2-normalised, as the rule normalises them): it scores those columns, as it did."""
    name = "bank" if rule["score"] == "knn" else "means"
    width = decode(rule[name], name).shape[1]
    return features[:, :width] if features.ndim == 2 and features.shape[1] > width else features


@functools.cache
def _blas_controller():
    from threadpoolctl import ThreadpoolController  # scikit-learn's dependency: always there

    return ThreadpoolController()


def one_blas_thread():
    """A context in which numpy's BLAS runs on one thread. The bank's matrix product is small
    (a batch of 64 against 5000 x 256 is ~80 MFLOP), and BLAS's own threads, competing with
    the runtime's and the server's for the same cores, made it several times slower than one
    thread on a busy 2-core machine (benchmarks/reject_cost.py, docs/benchmarks.md)."""
    return _blas_controller().limit(limits=1, user_api="blas")


def check_params(score: str, rule: Mapping[str, Any]) -> dict[str, Any]:
    """The rule's own parameters, checked (decodable arrays, ``k`` within the bank)."""
    missing = [key for key in PARAM_KEYS[score] if key not in rule]
    if missing:
        raise ValueError(
            f"reject={score} lacks its fitted {', '.join(missing)}; fit the rule on the training "
            f"split (train or python -m lightning_cls.calibrate with reject={score})."
        )
    arrays = {key: decode(rule[key], key) for key in ARRAY_KEYS[score]}
    out = {key: dict(rule[key]) for key in ARRAY_KEYS[score]}
    if score == "knn":
        out["k"] = check_k(rule["k"], len(arrays["bank"]))
    elif arrays["precision"].shape != (arrays["means"].shape[1],) * 2:
        raise ValueError(
            f"reject.precision has shape {list(arrays['precision'].shape)} but the class means "
            f"have {arrays['means'].shape[1]} features; fit the rule again."
        )
    return out


def summary(rule: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``rule`` without its arrays (their shapes instead): what logs and reports show."""
    if rule is None:
        return None
    return {
        key: (
            f"<{value['dtype']} {'x'.join(map(str, value['shape']))}>" if key in _ARRAYS else value
        )
        for key, value in rule.items()
    }


_ARRAYS = {key for keys in ARRAY_KEYS.values() for key in keys}


def _width_error(got: int, stored: int) -> str:
    return (
        f"The model's features have {got} values but its rejection rule was fitted on {stored}; "
        "the rule belongs to another network: fit it again for this one."
    )


class _FeatureRule(RejectRule):
    """A rule over the network's ``features`` output, fitted on the training split's."""

    needs_features = True
    name: str

    def check_params(self, rule):
        return check_params(self.name, rule)

    def fit(self, features, labels, k, bank_size, seed=0):
        return fit(self.name, features, labels, k, bank_size, seed)

    def scores(self, task, logits, features, rule):
        if features is None:
            raise ValueError(
                f"reject={self.name} scores the network's features, and none were given; run "
                "the model through a Predictor (it asks the runtime for them)."
            )
        return arrays.as_kind(scores(rule, arrays.as_numpy(features)), logits)


class KNearest(_FeatureRule):
    """``knn``: the cosine similarity to the ``k``-th nearest training feature."""

    name = "knn"
    params = PARAM_KEYS["knn"]

    def check_options(self, k, bank_size, images=None):
        bank = check_bank_size(bank_size)
        check_k(k, bank if images is None else min(bank, images))


class Mahalanobis(_FeatureRule):
    """``mahalanobis``: minus the smallest class-conditional Mahalanobis distance."""

    name = "mahalanobis"
    params = PARAM_KEYS["mahalanobis"]
