"""Likely label errors from out-of-fold predicted probabilities, planted errors to measure
the check with, and class counts.

The probabilities come from a probe (``doctor/probes.py``: the network trained per fold, a
linear probe on pixels, patch features or embeddings, a kNN vote); the ranking is by
self-confidence (as cleanlab's, Northcutt et al. 2021) and the number flagged follows the
estimated noise (``estimated_errors``), so the flagged set stays precise on dirty data.
"""

from __future__ import annotations

import numpy as np


def plant_label_noise(
    labels: np.ndarray, share: float, num_classes: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric label noise, for measuring the check (``doctor.plant_noise``): a copy of
    ``labels`` with ``round(share * N)`` rows, chosen uniformly at random, each moved to one of
    the other classes uniformly at random; and those rows, sorted. Seeded: the same rows and
    classes on every machine (numpy's PCG64 stream is stable across versions)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    rows = np.sort(rng.choice(len(labels), int(round(share * len(labels))), replace=False))
    noisy = np.array(labels, dtype=np.int64, copy=True)
    noisy[rows] = (noisy[rows] + rng.integers(1, num_classes, len(rows))) % num_classes
    return noisy, rows


def estimated_errors(labels: np.ndarray, probs: np.ndarray) -> int:
    """How many labels look wrong: the share of mislabeled rows, estimated as a mixture
    proportion (Scott et al. 2013's irreducibility bound) and times the rows.

    A wrong label's self-confidence (the probability the probe gives the given class) is
    distributed like the probe's probability of a class the image is not: ``E``, known exactly
    from the out-of-fold probabilities (every row's other classes). The given labels' ``G`` is
    ``(1 - eta) * clean + eta * E``, so ``eta <= G(t) / E(t)`` at every threshold ``t``, and
    tightest where clean rows are rare: the lowest thresholds that hold 10 given labels or more
    (fewer make a noisy ratio); the median ratio over ten of them is the estimate (chosen on
    a validation folder of CIFAR-10 photos: 117 for 96 wrong labels under a 67%-accurate
    probe, where E's lower half gave 170). The confident joint's calibrated count (cleanlab,
    Northcutt et al. 2021) is the other bound, tighter for strong probes (digits: 78 for 65,
    the mixture 96); the smaller of the two is returned. Unlike the confident joint's
    off-diagonal mass (which counts the probe's own mistakes as noise: 340 for 96 wrong labels
    under a 70%-accurate simulated probe), it stays near the truth for weak probes, and a
    probe that knows nothing estimates nearly every row wrong (so its self-test says so)."""
    n, k = probs.shape
    if n == 0 or k < 2:
        return 0
    rows = np.arange(n)
    given = np.sort(probs[rows, labels])
    other = np.ones_like(probs, dtype=bool)
    other[rows, labels] = False
    wrong = np.sort(probs[other])  # (N * (K - 1),) a wrong label's self-confidence
    thresholds = np.quantile(wrong, np.linspace(0.005, 0.5, 100))
    g = np.searchsorted(given, thresholds, side="right")  # given labels at or below each
    e = np.searchsorted(wrong, thresholds, side="right") / len(wrong)
    counted = np.flatnonzero(g >= 10)  # fewer rows make a noisy ratio
    first = counted[0] if len(counted) else len(thresholds) - 1
    mixture = int(round(min(1.0, float(np.median((g / n / e)[first : first + 10]))) * n))
    from cleanlab.count import num_label_issues  # the doctor extra

    joint = num_label_issues(labels, probs, estimation_method="off_diagonal_calibrated")
    return min(mixture, int(joint))  # two upper bounds: the tighter one


def ranked_rows(labels: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Rows whose given class is not the probe's guess, least self-confident first (the
    probability the probe gives the given class; cleanlab's ``self_confidence`` order)."""
    given = probs[np.arange(len(labels)), labels]
    disagree = np.flatnonzero(probs.argmax(1) != labels)
    return disagree[np.argsort(given[disagree], kind="stable")]


def label_issues(labels: np.ndarray, probs: np.ndarray, count: int | None = None) -> list[dict]:
    """The first ``count`` rows of the ranking (default: ``estimated_errors``, so the number
    flagged follows the estimated noise), most likely mistake first: row, given and suggested
    class index, and the probability the probe gave the given label."""
    labels = np.asarray(labels, dtype=np.int64)
    if len(np.unique(labels)) < 2:
        return []
    count = estimated_errors(labels, probs) if count is None else count
    return [
        {
            "row": int(i),
            "given": int(labels[i]),
            "suggested": int(probs[i].argmax()),
            "given_prob": round(float(probs[i, labels[i]]), 4),
            "suggested_prob": round(float(probs[i].max()), 4),
        }
        for i in ranked_rows(labels, probs)[:count]
    ]


def precision_at_recall(ranked_hits, relevant: int, recall: float) -> float | None:
    """Precision of the shortest head of a ranking (``ranked_hits``: True where the finding is
    a real error, most sure first) that holds at least ``recall`` of the ``relevant`` errors;
    None when the whole ranking holds fewer (or there are none)."""
    hits = np.cumsum(np.asarray(ranked_hits, dtype=bool))
    if relevant <= 0 or not len(hits):
        return None
    reached = np.flatnonzero(hits >= recall * relevant)
    if not len(reached):
        return None
    cut = int(reached[0]) + 1  # the first `cut` findings
    return float(hits[cut - 1] / cut)


def class_balance(
    counts: dict[str, list[int]], classes: list[str], ratio: float, task: str
) -> dict:
    """Counts per split (multi-label: positives per label), the train split's max/min ratio
    and, from ``ratio`` on, the settings that make up for it with the weights they will use."""
    from lightning_cls.training.tasks import TRAINING_TASKS

    train = counts["train"]
    most, least = max(train), min(train)
    imbalance = float("inf") if least == 0 else most / least
    out = {
        "counts": {split: dict(zip(classes, c)) for split, c in counts.items()},
        "imbalance": round(imbalance, 3) if least else None,
        "empty_classes": [name for name, n in zip(classes, train) if n == 0],
        "suggest": [],
    }
    if imbalance < ratio:
        return out
    out.update(TRAINING_TASKS.get(task).balance_advice(train, classes))  # the task's options
    return out
