"""``TTA(mode="selective")``: the confidence threshold below which an image gets test-time
augmentation, chosen on the validation split (the learning half; ``inference.tta`` applies it,
and the threshold travels as ``tta.threshold`` in checkpoints and every spec).

The rule: the least share of images with TTA whose validation accuracy is within ``tolerance``
of full TTA's. The images sorted by the plain prediction's confidence (max probability after
the task's temperature), TTA for the k least confident: accuracy(k) = full-TTA hits among
those k + plain hits among the rest; the smallest k with accuracy(k) >= accuracy(N) -
``tolerance``. (The speed-run idea — skip the TTA where the net is already sure — with the
threshold fitted on held-out data instead of fixed by hand.)
"""

from __future__ import annotations

import math

import torch


def choose_threshold(
    confidence: torch.Tensor, plain_ok: torch.Tensor, full_ok: torch.Tensor, tolerance: float
) -> tuple[float, float, float]:
    """(N,) confidences and per-image hits of the plain and the full-TTA prediction ->
    (threshold, share of images below it, validation accuracy with selective TTA)."""
    n = len(confidence)
    if n == 0:
        raise ValueError("tta=selective needs validation images to choose its threshold.")
    order = confidence.double().argsort()
    conf = confidence.double()[order]  # (N,) ascending
    plain, full = plain_ok[order].double(), full_ok[order].double()
    zero = torch.zeros(1, dtype=torch.float64)
    # accuracy with TTA for the k least confident, k = 0..N: (N + 1,)
    hits = torch.cat([zero, full.cumsum(0)]) + plain.sum() - torch.cat([zero, plain.cumsum(0)])
    accuracy = hits / n
    # a threshold can only split between distinct confidences: k = 0, N, or conf[k-1] < conf[k]
    cut = torch.ones(n + 1, dtype=torch.bool)
    cut[1:n] = conf[:-1] < conf[1:]
    good = cut & (accuracy >= accuracy[n] - tolerance - 1e-12)
    k = int(good.nonzero()[0])
    if k == 0:
        threshold = float(conf[0])  # confidence < conf[0]: none
    elif k == n:
        threshold = math.nextafter(float(conf[-1]), math.inf)  # every image
    else:
        threshold = float((conf[k - 1] + conf[k]) / 2)
    return threshold, k / n, float(accuracy[k])
