"""The open-set report's figures (``eval ood.near=... ood.far=...``): the known split's
risk-coverage curve beside each unknown set's OSCR curve, and one score histogram per set.
matplotlib ``Figure`` objects framed as ``figures.plots`` frames its own (``painting.figure``,
no pyplot state), written atomically."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_cls.figures import painting
from lightning_cls.fileio import atomic_savefig
from lightning_cls.inference import open_set

if TYPE_CHECKING:
    from lightning_cls.inference.open_set_report import OpenSetScores


def risk_coverage_plot(
    known: np.ndarray, correct: np.ndarray, unknown: Mapping[str, np.ndarray], path: Path
) -> Path:
    """Left: selective risk of the known images against coverage (AURC in the legend).
    Right: correct-classification rate of the knowns against the share of each unknown set
    accepted, one curve per set (OSCR in the legend), the closed-set accuracy dotted."""
    fig = painting.figure(1000, 420)
    left, right = fig.subplots(1, 2)
    fig.subplots_adjust(left=0.07, right=0.985, bottom=0.13, top=0.91, wspace=0.22)
    coverage, risk = open_set.risk_coverage_curve(known, correct)
    left.plot(coverage, risk, label=f"known (AURC {open_set.aurc(known, correct):.3f})")
    left.set(xlabel="coverage (share of known images answered)", ylabel="selective risk")
    left.set(title="Risk-coverage", xlim=(0, 1), ylim=(0, max(0.05, float(risk.max()) * 1.05)))
    for name, scores in unknown.items():
        fpr, ccr = open_set.oscr_curve(known, correct, scores)
        right.plot(fpr, ccr, label=f"{name} (OSCR {open_set.oscr(known, correct, scores):.3f})")
    right.axhline(float(np.mean(correct)), color="grey", linestyle=":", label="accuracy")
    right.set(xlabel="unknowns accepted (FPR)", ylabel="known images right and accepted")
    right.set(title="Open-set classification rate", xlim=(0, 1), ylim=(0, 1.02))
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
    return atomic_savefig(fig, path, **painting.SAVE)


def score_histogram(
    known: np.ndarray,
    unknown: np.ndarray,
    name: str,
    score: str,
    threshold: float | None,
    path: Path,
) -> Path:
    """The score of the known images and of one unknown set, overlaid on shared bins, with
    the deployed threshold (images at or above it get a label) where the model has one."""
    fig = painting.figure(640, 400)
    ax = fig.subplots()
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.13, top=0.9)
    both = np.r_[known, unknown]
    bins = np.linspace(both.min(), both.max() if both.max() > both.min() else both.min() + 1, 41)
    ax.hist(known, bins=bins, alpha=0.6, density=True, label=f"known ({len(known)})")
    ax.hist(unknown, bins=bins, alpha=0.6, density=True, label=f"{name} ({len(unknown)})")
    if threshold is not None:
        ax.axvline(threshold, color="black", linestyle="--", label=f"threshold {threshold:.3g}")
    auroc = open_set.auroc(known, unknown)
    ax.set(xlabel=f"score ({score}; higher: more known)", ylabel="density")
    ax.set(title=f"known vs {name} (AUROC {auroc:.3f})")
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    return atomic_savefig(fig, path, **painting.SAVE)


def write_ood_figures(found: OpenSetScores, out_dir: str | Path) -> dict[str, dict[str, Any]]:
    """``ood_risk_coverage.png`` and one ``ood_scores_<name>.png`` per unknown set in
    ``out_dir``, from ``inference.open_set_report.open_set_scores``; returns its report with
    each set's ``histogram`` file name."""
    out_dir = Path(out_dir)
    risk_coverage_plot(
        found.inside, found.correct, found.unknown, out_dir / "ood_risk_coverage.png"
    )
    for name, outside in found.unknown.items():
        path = out_dir / f"ood_scores_{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.png"
        score_histogram(found.inside, outside, name, found.score, found.threshold, path)
        found.report[name]["histogram"] = path.name
    return found.report
