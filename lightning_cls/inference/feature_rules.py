"""Rejection in feature space: what the rules over the network's features share.

Confidence scores computed from the logits (``msp``, ``energy``) fail on inputs that drive the
logits high: on CIFAR-10 photos uniform noise scored as *more* familiar than every real image
(docs/guides/calibration.md). A ``FeatureRule`` looks at the network's features instead (the
``features`` output every artifact of such a model carries, ``network.FeatureNet``: the input
of its last linear layer and its first convolution's max-pooled responses, each part
L2-normalised). The built-ins are in ``rules/`` (``knn``, ``mahalanobis``, ``rmds``; ``react``
and ``vim`` on ``HeadRule``, which also read the logits and store the last linear layer); each
is built with its own options, fits its state on the training split's features and scores from
it.

Every rule's score is "higher = more familiar"; the threshold is the one that keeps
``reject_keep`` of the validation images, as for the logit scores. The fitted state is plain
arrays stored in the rejection rule (base64 inside the spec, ``encode``/``decode``), so ONNX and
OpenVINO predict/serve compute the score with numpy: no torch import here.
"""

from __future__ import annotations

import base64
import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from lightning_cls.inference import arrays
from lightning_cls.inference.reject_rules import REJECT_RULES, RejectRule

OUTPUT_NAME = "features"  # the second named output of an exported model with such a rule


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


@functools.cache
def _blas_controller():
    from threadpoolctl import ThreadpoolController  # scikit-learn's dependency: always there

    return ThreadpoolController()


def one_blas_thread():
    """A context in which numpy's BLAS runs on one thread. A rule's matrix product is small
    (a batch of 64 against 5000 x 256 is ~80 MFLOP), and BLAS's own threads, competing with
    the runtime's and the server's for the same cores, made it several times slower than one
    thread on a busy 2-core machine (benchmarks/reject_cost.py, docs/benchmarks.md)."""
    return _blas_controller().limit(limits=1, user_api="blas")


def summary(rule: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``rule`` without its arrays (their shapes instead, in nested rules too): what logs and
    reports show."""
    if rule is None:
        return None
    return {
        key: (
            f"<{value['dtype']} {'x'.join(map(str, value['shape']))}>"
            if isinstance(value, Mapping) and {"dtype", "shape", "data"} <= set(value)
            else summary(value)
            if isinstance(value, Mapping)
            else value
        )
        for key, value in rule.items()
    }


def _width_error(got: int, stored: int) -> str:
    return (
        f"The model's features have {got} values but its rejection rule was fitted on {stored}; "
        "the rule belongs to another network: fit it again for this one."
    )


class FeatureRule(RejectRule):
    """A rule over the network's ``features`` output, fitted on the training split's.
    ``arrays``: the keys of its state that are stored arrays (``encode``); the first one's rows
    are as wide as the features it was fitted on. A subclass gives ``fit``, ``check_state``
    (its own checks of the decoded state) and ``feature_scores``."""

    needs_features = True
    arrays: tuple[str, ...] = ()

    def check_params(self, rule):
        missing = [key for key in self.params if key not in rule]
        if missing:
            raise ValueError(
                f"reject={self.name} lacks its fitted {', '.join(missing)}; fit the rule on the "
                f"training split (train or python -m lightning_cls.calibrate with "
                f"reject={self.name})."
            )
        stored = self.stored(rule)
        return {**{key: dict(rule[key]) for key in self.arrays}, **self.check_state(rule, stored)}

    def stored(self, rule: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The rule's arrays, decoded (cached per stored string)."""
        return {key: decode(rule[key], key) for key in self.arrays}

    def check_state(self, rule: Mapping[str, Any], stored: dict[str, np.ndarray]) -> dict:
        """The rule's stored non-array values, checked against its decoded ``stored`` arrays."""
        return {}

    def feature_scores(self, rule: Mapping[str, Any], z: np.ndarray, stored: dict) -> np.ndarray:
        """(B, D) L2-normalised float32 features -> (B,) float32 scores."""
        raise NotImplementedError

    def score_features(self, rule: Mapping[str, Any], features) -> np.ndarray:
        """(B, D) features -> (B,) float32 scores of the stored ``rule``: higher = more like
        the training images. A rule fitted before ``network.FeatureNet`` added the first
        convolution's part (a checkpoint's state fitted on the penultimate features alone) is as
        wide as the penultimate features, which come first (and L2-normalised, as the rule
        normalises them): it scores those columns, as it did."""
        stored = self.stored(rule)
        width = stored[self.arrays[0]].shape[1]
        features = np.asarray(features)
        if features.ndim == 2 and features.shape[1] > width:
            features = features[:, :width]
        z = normalized(features)
        if z.shape[1] != width:
            raise ValueError(_width_error(z.shape[1], width))
        return self.feature_scores(rule, z, stored)

    def scores(self, task, logits, features, rule):
        if features is None:
            raise ValueError(
                f"reject={self.name} scores the network's features, and none were given; run "
                "the model through a Predictor (it asks the runtime for them)."
            )
        return arrays.as_kind(self.score_features(rule, arrays.as_numpy(features)), logits)


def head_arrays(head) -> tuple[np.ndarray, np.ndarray]:
    """``head``: the network's last linear layer (an ``nn.Linear``, or its (weight, bias)) ->
    float32 numpy (weight (K, D), bias (K,)); no bias: zeros."""
    weight, bias = head if isinstance(head, (tuple, list)) else (head.weight, head.bias)
    weight = arrays.as_numpy(weight)
    if weight.ndim != 2:
        raise ValueError(f"the head's weight has shape {list(weight.shape)}, not (classes, D).")
    bias = np.zeros(len(weight), np.float32) if bias is None else arrays.as_numpy(bias)
    if bias.shape != (len(weight),):
        raise ValueError(
            f"the head's bias has shape {list(bias.shape)} but its weight {list(weight.shape)}."
        )
    return weight, bias


class HeadRule(FeatureRule):
    """A rule over the penultimate features ``h`` themselves (not only their direction) and
    the network's last linear layer, ``logits = h W^T + b``: ReAct, ViM. Its stored state
    starts with that layer's ``weight`` (K, D) and ``bias`` (K,), float32, so every artifact
    scores as the checkpoint does. The features every runtime gives hold ``h`` L2-normalised
    (``network.FeatureNet``; a network without a stem: ``h`` as it is) in their first D
    columns; ``penultimate`` gives back ``h``'s length from the logits, per image the scale
    ``s`` that makes ``s z W^T + b`` the least-squares match of the logits. A subclass gives
    ``fit_head`` and ``head_scores``."""

    needs_head = True
    needs_logits = True
    arrays: tuple[str, ...] = ("weight", "bias")

    def fit(self, features, labels, seed=0, *, logits=None, task=None, head=None):
        self.check_given({"logits": logits, "task": task, "head": head})
        weight, bias = head_arrays(head)
        features, logits = arrays.as_numpy(features), arrays.as_numpy(logits)
        h = self.penultimate(features, logits, weight, bias)
        return {
            "weight": encode(weight),
            "bias": encode(bias),
            **self.fit_head(h, logits, weight, bias, task),
        }

    def fit_head(self, h: np.ndarray, logits: np.ndarray, weight, bias, task) -> dict[str, Any]:
        """The rule's own state, fitted on the training images' penultimate features ``h``
        (N, D, float64) and their raw ``logits``."""
        raise NotImplementedError

    def head_scores(self, task, rule, stored, h: np.ndarray, logits: np.ndarray) -> np.ndarray:
        """(B, D) float64 penultimate features and their raw (B, K) logits -> (B,) scores."""
        raise NotImplementedError

    def check_state(self, rule, stored):
        weight, bias = stored["weight"], stored["bias"]
        if weight.ndim != 2 or bias.shape != (len(weight),):
            raise ValueError(
                f"reject.weight {list(weight.shape)} and reject.bias {list(bias.shape)} are not "
                "a linear layer's (classes, D) and (classes,); fit the rule again."
            )
        return {}

    @staticmethod
    def penultimate(features, logits, weight, bias) -> np.ndarray:
        """(B, >= D) features and (B, K) raw logits -> (B, D) float64 penultimate features."""
        features, logits = np.asarray(features), np.asarray(logits, np.float64)
        width = weight.shape[1]
        if features.ndim != 2 or features.shape[1] < width:
            raise ValueError(_width_error(features.shape[-1], width))
        if logits.ndim != 2 or logits.shape[1] != len(weight):
            raise ValueError(
                f"The model gives {logits.shape[-1]} logits but its rejection rule's head has "
                f"{len(weight)} classes; the rule belongs to another network: fit it again."
            )
        z = normalized(features[:, :width]).astype(np.float64)
        with one_blas_thread():
            wz = z @ weight.T.astype(np.float64)  # (B, K): the logits of a unit-length h
        scale = (wz * (logits - bias)).sum(1) / np.maximum((wz * wz).sum(1), 1e-30)
        return z * scale[:, None]

    def scores(self, task, logits, features, rule):
        if features is None:
            return super().scores(task, logits, features, rule)  # its message
        stored = self.stored(rule)
        raw = arrays.as_numpy(logits)
        h = self.penultimate(arrays.as_numpy(features), raw, stored["weight"], stored["bias"])
        out = self.head_scores(task, rule, stored, h, raw)
        return arrays.as_kind(np.asarray(out, np.float32), logits)


def fit(score: str, features, labels, seed: int = 0, **options: Any) -> dict[str, Any]:
    """The stored state of rule ``score`` built with ``options``, fitted on training
    ``features`` (N, D) and ``labels`` (a rule over features alone)."""
    return REJECT_RULES.create(score, **options).fit(features, labels, seed)


def scores(rule: Mapping[str, Any], features) -> np.ndarray:
    """(B, D) features -> (B,) float32 scores of the stored ``rule`` (its ``score`` names it)."""
    return REJECT_RULES.create(rule["score"]).score_features(rule, features)
