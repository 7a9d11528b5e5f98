"""The label check's self-test: does the ranking find label errors on *this* data?

A probe's accuracy against the given labels cannot say: it is capped at one minus the noise
rate, so the dirtier the data the likelier such a gate refuses to help. Instead, a known share
of extra flips is planted in a copy of the labels (in memory; the user's files and the
reported findings never see them) and the check runs again: the share of planted flips it
flags (the self-test recall) is how much of the real errors it finds, at any noise rate.

The probabilities are the probe's out-of-fold ones, not re-fitted: a row's probabilities come
from a model that never saw its label, so flipping that label leaves them as they are (the
other folds' models would see ~1% more noise, which they shrug off). The self-test is thus
free for every probe, and is repeated over ``REPEATS`` seeded plantings to steady it.

``doctor.probe=auto`` compares its probes at one cut (the fewest any of them estimates wrong,
plus the planted), since a probe that flags more finds more planted flips by chance alone.

Chance: a ranking that knows nothing flags a planted row with the probability that it flags
any row (the flagged share), so the gate also asks for twice that.
"""

from __future__ import annotations

import numpy as np

from lightning_cls.doctor.labels import label_issues, plant_label_noise

SHARE = 0.01  # planted per repeat: 1% of the rows...
MINIMUM = 10  # ... and at least this many
REPEATS = 20


def self_test(
    labels: np.ndarray, probs: np.ndarray, num_classes: int, seed: int, count: int | None = None
) -> dict:
    """Plant extra flips in copies of ``labels``, flag with ``probs`` as the check does, and
    count: planted, found (flagged), recall, chance (the flagged share) and precision (the
    share of planted flips among the flags the planting added). ``count``: flag that many
    (plus the planted) instead of the estimate, to compare probes at one cut."""
    n = len(labels)
    per = min(n, max(MINIMUM, int(round(SHARE * n))))
    base = {i["row"] for i in label_issues(labels, probs, count)}
    planted = found = flagged = added = 0
    for repeat in range(REPEATS):
        noisy, rows = plant_label_noise(labels, per / n, num_classes, seed + 7919 * (repeat + 1))
        flags = {
            i["row"] for i in label_issues(noisy, probs, None if count is None else count + per)
        }
        hits = len(flags & set(rows.tolist()))
        planted, found, flagged = planted + len(rows), found + hits, flagged + len(flags)
        added += len(flags - (base - set(rows.tolist())))  # new flags, planted rows included
    return {
        "planted": planted,
        "repeats": REPEATS,
        "found": found,
        "recall": round(found / planted, 4) if planted else 0.0,
        "chance": round(flagged / (REPEATS * n), 4) if n else 0.0,
        "precision": round(found / added, 4) if added else None,
    }


def trusted(test: dict, min_recall: float) -> bool:
    """The gate: at least ``min_recall`` of the planted flips found, and twice chance."""
    return test["recall"] >= min_recall and test["recall"] >= 2 * test["chance"]


def verdict_reason(probe: dict) -> str:
    """Why the findings are (not) trusted, in one clause, from ``result['label_probe']``."""
    test = probe["self_test"]
    reason = (
        f"the {probe['probe']} probe's self-test flagged {test['found']} of {test['planted']} "
        f"label flips planted in memory (recall {test['recall']:.2f}, precision "
        f"{_share(test['precision'])}; chance {test['chance']:.2f}; needs "
        f"doctor.min_self_test_recall={probe['min_self_test_recall']} and twice chance)"
    )
    floor = probe.get("min_probe_accuracy")
    if floor is not None and probe["out_of_fold_accuracy"] < floor:
        reason += (
            f"; the probe is {probe['out_of_fold_accuracy']:.3f} accurate out of fold, below "
            f"doctor.min_probe_accuracy={floor}"
        )
    return reason


def _share(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"
