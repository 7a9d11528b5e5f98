"""Temperature scaling (Guo et al. 2017) and how calibrated probabilities are measured.

``fit_temperature`` fits ``T = exp(t)`` minimising the task's negative log-likelihood by L-BFGS
on ``t`` (one per label for a multi-label model: its labels' losses are separable);
``rescale_for_ece`` multiplies it by the factor with the lowest validation ECE
(``temperature_fit=ece``). ``expected_calibration_error`` (torchmetrics, ``BINS`` bins) and
``measure`` (ECE, NLL and the task's score before and after) report what a temperature did
(the reliability diagram: ``figures/calibration.py``). Pure tensor functions, called by
``calibration.Calibrator``.
"""

from __future__ import annotations

import math

import torch

from lightning_cls.inference.spec import InputSpec
from lightning_cls.inference.tasks import Task

BINS = 15  # ECE and reliability-diagram bins (Guo et al. use 15)


def fit_temperature(
    logits: torch.Tensor, labels: torch.Tensor, task: Task, steps: int = 100
) -> float | list[float]:
    """The temperatures (``task.calibration.temperatures``: one, or one per label) minimising
    the task's NLL of ``labels`` given ``logits / T`` (``task.calibration.nll``), by L-BFGS on
    ``log T``. Returns a
    plain float, or a list of them when there are several."""
    logits = logits.detach().float()
    width = task.calibration.temperatures(logits.shape[1])
    log_t = torch.zeros(width, requires_grad=True)
    optimizer = torch.optim.LBFGS([log_t], lr=0.5, max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = task.calibration.nll(logits / log_t.exp(), labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    temperatures = log_t.detach().exp().clamp(1e-2, 1e2).tolist()
    if not all(math.isfinite(t) for t in temperatures):
        raise ValueError("Temperature scaling diverged (non-finite logits on validation?).")
    return [round(t, 6) for t in temperatures] if width > 1 else round(temperatures[0], 6)


def rescale_for_ece(
    logits: torch.Tensor,
    labels: torch.Tensor,
    task: Task,
    temperature: float | list[float],
    span: float = 4.0,
    points: int = 401,
) -> float | list[float]:
    """``temperature`` (one, or one per label) times the factor in ``[1/span, span]`` (a log
    grid of ``points``) whose probabilities have the lowest ECE on ``labels``, averaged over
    10 to 20 equal-width bins (one bin count's ECE jumps as images cross bin edges, and its
    minimum moves with them); among equal ECEs the factor nearest 1. ``task`` is the
    uncalibrated one (temperature 1)."""
    logits = logits.detach().float()
    base = torch.as_tensor(temperature, dtype=torch.float32)
    factors = torch.logspace(-math.log10(span), math.log10(span), points).tolist()

    def error(factor: float) -> float:
        probs = task.probabilities(logits / (base * factor))
        confidence, correct = task.calibration.reliability(probs, labels)
        return sum(binned_ece(confidence, correct, bins) for bins in range(10, 21)) / 11

    best = min(factors, key=lambda f: (round(error(f), 9), abs(math.log(f))))
    scaled = (base * best).clamp(1e-2, 1e2).tolist()
    return [round(t, 6) for t in scaled] if isinstance(scaled, list) else round(scaled, 6)


def binned_ece(confidence: torch.Tensor, correct: torch.Tensor, bins: int) -> float:
    """The L1 ECE of (confidence, correct) pairs in ``bins`` equal-width bins, binned as
    torchmetrics bins (``expected_calibration_error``), without its per-call overhead."""
    confidence, correct = confidence.double(), correct.double()
    edges = torch.linspace(0, 1, bins + 1, dtype=torch.float64)
    index = (torch.bucketize(confidence, edges, right=True) - 1).clamp(0, bins - 1)
    gap = torch.zeros(bins, dtype=torch.float64).index_add_(0, index, correct - confidence)
    return (gap.abs().sum() / max(len(confidence), 1)).item()


def expected_calibration_error(probs: torch.Tensor, labels: torch.Tensor, task: Task) -> float:
    """ECE (torchmetrics, ``BINS`` equal-width bins, L1) as ``task`` measures it
    (``task.calibration.calibration_error``: multi-class on the top-1 confidence, multi-label
    over every (image, label) probability)."""
    return task.calibration.calibration_error(probs, labels, BINS)


def measure(split, base: InputSpec, calibrated: InputSpec, logits, labels) -> dict[str, float]:
    """ECE, NLL and the task's score on ``split`` before and after calibration."""
    out = {}
    for when, spec in (("before", base), ("after", calibrated)):
        probs = spec.decision.probabilities(logits)
        scaled = logits / torch.as_tensor(spec.decision.temperature, dtype=torch.float32)
        task = spec.decision
        out[f"{split}_ece_{when}"] = round(expected_calibration_error(probs, labels, task), 6)
        out[f"{split}_nll_{when}"] = round(task.calibration.nll(scaled, labels).item(), 6)
        out[f"{split}_{spec.decision.score_name}_{when}"] = round(
            spec.decision.score(probs, labels), 6
        )
    return out
