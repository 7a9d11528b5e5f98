"""``python -m lightning_cls.summarize <multirun dir>``: one table of a sweep, best job first.

Reads every job folder of a Hydra multirun (``<dir>/<job number>/``): its overrides
(``.hydra/overrides.yaml``) and ``results.json`` (written by train.py), plus the optuna
sweeper's ``optimization_results.yaml`` when there is one (trial states: COMPLETE, PRUNED,
FAIL; job number = trial number). Writes ``summary.md``, ``summary.csv`` and ``summary.png``
(the objective against each swept parameter) into the multirun folder and prints the table.
A job without ``results.json`` (it crashed, or is still running) is listed as such.

A k-fold sweep (``-m data.folds=5 data.fold='range(0,5)'``) also gets a "mean ± std over folds"
table: jobs that differ only in ``data.fold`` form one group, whose objective and metrics are
averaged (std: the sample standard deviation, n - 1; blank with one fold).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import statistics
from pathlib import Path

import yaml

from lightning_cls.cli import run_cli
from lightning_cls.fileio import atomic_write_text

log = logging.getLogger(__name__)
_HIDDEN = ("optuna.",)  # overrides every trial job gets; not parameters of the search
_METRICS = ("val/acc", "val/map", "val/loss", "test/acc", "test/map", "test/loss")
FOLD = "data.fold"


def collect(sweep_dir: Path) -> list[dict]:
    """One row per job folder: job, status, overrides (dict), metrics."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(
            f"{sweep_dir} is not a folder; pass a multirun dir "
            "(outputs/train/multirun/<date>/<time>)."
        )
    trials = _optuna_trials(sweep_dir)
    rows = []
    for job in sorted(
        (p for p in sweep_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
    ):
        overrides_file = job / ".hydra" / "overrides.yaml"
        overrides = yaml.safe_load(overrides_file.read_text()) if overrides_file.is_file() else []
        params = dict(o.split("=", 1) for o in overrides if "=" in o and not o.startswith(_HIDDEN))
        results_file = job / "results.json"
        results = json.loads(results_file.read_text()) if results_file.is_file() else {}
        status = trials.get(
            int(job.name),
            "PRUNED"
            if results.get("pruned_at_epoch") is not None
            else "COMPLETE"
            if results
            else "NO RESULTS",
        )
        metrics = {**results.get("val", {}), **results.get("test", {})}
        rows.append(
            {
                "job": int(job.name),
                "status": status,
                "params": params,
                "objective": results.get("objective"),
                **{m: metrics.get(m) for m in _METRICS},
                "wall_time_s": results.get("wall_time_s"),
                "pruned_at_epoch": results.get("pruned_at_epoch"),
            }
        )
    if not rows:
        raise FileNotFoundError(
            f"No job folders (0/, 1/, ...) in {sweep_dir}; pass the multirun dir itself, not a "
            "job folder or the multirun root."
        )
    return rows


def _optuna_trials(sweep_dir: Path) -> dict[int, str]:
    path = sweep_dir / "optimization_results.yaml"
    if not path.is_file():
        return {}
    return {t["number"]: t["state"] for t in yaml.safe_load(path.read_text()).get("trials", [])}


def rank(rows: list[dict], mode: str = "max") -> list[dict]:
    """Best objective first; jobs without one (failed, no results) last."""
    sign = -1 if mode == "max" else 1
    return sorted(
        rows, key=lambda r: (r["objective"] is None, sign * (r["objective"] or 0), r["job"])
    )


def _metrics(rows: list[dict]) -> list[str]:
    """The metric columns some job has: a multi-class sweep has no mAP, a multi-label one no
    accuracy (a sweep with no results at all keeps every column)."""
    found = [m for m in _METRICS if any(r.get(m) is not None for r in rows)]
    return found or list(_METRICS)


def table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and string cells; parameter columns are the overrides that differ across jobs."""
    keys = sorted({k for r in rows for k in r["params"]})
    swept = [k for k in keys if len({r["params"].get(k) for r in rows}) > 1]
    metrics = _metrics(rows)
    header = ["job", "status", *swept, "objective", *metrics, "wall_time_s", "pruned_at_epoch"]
    cells = [[_fmt(r[h]) if h in r else r["params"].get(h, "") for h in header] for r in rows]
    return header, cells


def over_folds(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of mean ± std per group of jobs that differ only in ``data.fold``;
    no rows when no job has a ``data.fold`` override."""
    if not any(FOLD in r["params"] for r in rows):
        return [], []
    keys = sorted({k for r in rows for k in r["params"] if k != FOLD})
    swept = [k for k in keys if len({r["params"].get(k) for r in rows}) > 1]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["objective"] is not None:
            groups.setdefault(tuple(r["params"].get(k, "") for k in swept), []).append(r)
    metrics = _metrics(rows)
    header = [*swept, "folds", "objective", *metrics]
    cells = []
    for key, members in sorted(groups.items()):
        folds = ",".join(sorted((m["params"].get(FOLD, "") for m in members), key=str))
        stats = [_mean_std([m[h] for m in members]) for h in ("objective", *metrics)]
        cells.append([*key, folds, *stats])
    return header, cells


def _mean_std(values: list) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return ""
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def _markdown(header: list[str], cells: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in cells]


def _fmt(value) -> str:
    if value is None:
        return ""
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def summarize(sweep_dir: Path, mode: str = "max") -> dict[str, Path]:
    """Write summary.md/.csv/.png into ``sweep_dir``; return their paths."""
    if mode not in ("max", "min"):
        raise ValueError(f"mode={mode!r}; use max (accuracy) or min (loss).")
    rows = rank(collect(sweep_dir), mode)
    header, cells = table(rows)
    out = {k: Path(sweep_dir) / f"summary.{k}" for k in ("md", "csv", "png")}
    lines = _markdown(header, cells)
    fold_header, fold_cells = over_folds(rows)
    if fold_cells:
        lines += ["", "Mean ± std over folds:", "", *_markdown(fold_header, fold_cells)]
    atomic_write_text(out["md"], "\n".join(lines) + "\n")
    text = io.StringIO(newline="")
    csv.writer(text).writerows([header, *cells])
    atomic_write_text(out["csv"], text.getvalue())
    swept = header[2 : header.index("objective")]
    from lightning_cls.figures.sweep import plot_sweep  # matplotlib: only when writing

    plot_sweep(rows, swept, out["png"])
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m lightning_cls.summarize", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "sweep_dir", type=Path, help="a multirun folder: outputs/train/multirun/<date>/<time>"
    )
    parser.add_argument(
        "--mode", default="max", choices=("max", "min"), help="best = max or min objective"
    )
    args = parser.parse_args(argv)
    out = summarize(args.sweep_dir, args.mode)
    print(out["md"].read_text(), end="")  # the CLI's output is the table itself
    print(f"\nWrote {out['md']}, {out['csv']} and {out['png']}")


if __name__ == "__main__":
    run_cli(main)
