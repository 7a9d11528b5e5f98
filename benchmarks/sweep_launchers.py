"""Wall time of a 2-job sweep: joblib (2 jobs at once, 1 thread each on 2 cores) against the
basic launcher (the 2 jobs one after the other, each with every core's thread).

Each round runs both variants back to back (order alternating between rounds) so both see the
same machine load; reports per-variant wall times (whole command, including Python start-up)
and the paired ratio sequential / joblib, plus the jobs' own training times and threads.

    python benchmarks/sweep_launchers.py [--rounds 3] [--epochs 10] [--quick] [--root DIR]

``--root DIR`` keeps the sweeps' folders there (default: a temporary folder, removed);
tests/benchmarks/test_scale_out_benchmarks.py checks the joblib jobs' folders and threads of
the --quick run, the one joblib sweep of the suite.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from paired import cpu_name, paired_ratio, summarize  # sibling file in benchmarks/

QUIET = [
    "trainer.enable_progress_bar=false",
    "~callbacks.progress_bar",
    "~callbacks.model_summary",
    "~callbacks.plots",
    "~callbacks.model_weights",
]
VARIANTS = {"joblib": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], "sequential": []}
# --quick is a smoke run of the script: each job trains one epoch of digits (about a second;
# enough to be well above chance, which the test checks), validates on one batch, and draws no
# prediction mosaic (the processes' start-up is the rest of its cost).
QUICK = [
    "++trainer.limit_val_batches=1",
    "prediction_mosaic=false",
]


def run(variant: str, epochs: int, root: Path, extra: list[str]) -> dict:
    """One 2-job sweep; its wall time and each job's training time and thread count."""
    sweep = root / f"{variant}-{time.monotonic_ns()}"
    cmd = [
        sys.executable,
        "-m",
        "lightning_cls.train",
        "-m",
        "optimizer.lr=1e-3,3e-3",
        f"trainer.max_epochs={epochs}",
        *QUIET,
        f"paths.root_dir={root}",
        f"hydra.sweep.dir={sweep}",
        *VARIANTS[variant],
        *extra,
    ]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    start = time.perf_counter()
    subprocess.run(cmd, cwd=root, check=True, capture_output=True, env=env)
    wall = time.perf_counter() - start
    jobs = [json.loads((sweep / str(j) / "results.json").read_text()) for j in (0, 1)]
    return {
        "sweep": str(sweep),
        "wall_s": wall,
        "job_s": [j["wall_time_s"] for j in jobs],
        "threads": [j["torch_threads"] for j in jobs],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="1 round of 1-epoch jobs (smoke test)")
    parser.add_argument("--root", type=Path, help="keep the sweeps' folders here")
    args = parser.parse_args()
    rounds, epochs = (1, 1) if args.quick else (args.rounds, args.epochs)
    extra = QUICK if args.quick else []
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root.resolve() if args.root else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        for i in range(rounds):
            order = list(VARIANTS) if i % 2 == 0 else list(VARIANTS)[::-1]
            results.append({v: run(v, epochs, root, extra) for v in order})
    walls = [{v: r[v]["wall_s"] for v in VARIANTS} for r in results]
    print(
        json.dumps(
            {
                "benchmark": "sweep_launchers",
                "cpu": cpu_name(),
                "cores": os.cpu_count(),
                "epochs": epochs,
                "rounds": results,
                "joblib_wall_s": summarize([w["joblib"] for w in walls]),
                "sequential_wall_s": summarize([w["sequential"] for w in walls]),
                "sequential_over_joblib": paired_ratio(walls, "sequential", "joblib"),
            }
        )
    )


if __name__ == "__main__":
    main()
