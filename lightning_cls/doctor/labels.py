"""Likely label errors from out-of-fold predicted probabilities, planted errors to measure
the check with, and class counts.

The probabilities come from a probe (``doctor/probes.py``: the network trained per fold, or a
linear probe on pixels or embeddings); the ranking is cleanlab's ``find_label_issues``
(confident learning, Northcutt et al. 2021), ordered by self-confidence.
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


def label_issues(labels: np.ndarray, probs: np.ndarray) -> list[dict]:
    """Rows cleanlab flags, most confident mistake first: row, given and suggested class
    index, and the probability the probe gave the given label."""
    from cleanlab.filter import find_label_issues  # the doctor extra

    present = np.unique(labels)
    if len(present) < 2:
        return []
    ranked = find_label_issues(labels, probs, return_indices_ranked_by="self_confidence", n_jobs=1)
    return [
        {
            "row": int(i),
            "given": int(labels[i]),
            "suggested": int(probs[i].argmax()),
            "given_prob": round(float(probs[i, labels[i]]), 4),
            "suggested_prob": round(float(probs[i].max()), 4),
        }
        for i in ranked
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
