"""k-fold cross-validation end to end: a Hydra multirun over data.fold on the digits data,
then `python -m lightning_cls.summarize` reports mean ± std over the folds."""

from __future__ import annotations

import json
import statistics

import pytest

from lightning_cls.summarize import over_folds, summarize


@pytest.mark.slow
def test_multirun_over_folds_then_summarize_mean_and_std(fork_server, fork_env, tmp_path):
    sweep = tmp_path / "sweep"
    proc = fork_server.run(  # python -m, forked from the session's pre-imported server
        [
            "-m",
            "lightning_cls.train",
            "-m",
            "data.folds=3",
            "data.fold=range(0,3)",
            "trainer.max_epochs=1",
            "+trainer.limit_train_batches=8",
            "trainer.enable_progress_bar=false",
            "~callbacks.progress_bar",
            "test=false",
            f"paths.root_dir={tmp_path}",
            f"hydra.sweep.dir={sweep}",
        ],
        tmp_path,
        fork_env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads((sweep / str(i) / "results.json").read_text()) for i in range(3)]
    assert [f"data.fold={i}" in r["overrides"] for i, r in enumerate(results)] == [True] * 3
    accs = [r["val"]["val/acc"] for r in results]
    assert len(set(accs)) > 1  # three different validation folds

    out = fork_server.run(["-m", "lightning_cls.summarize", str(sweep)], tmp_path, fork_env, 120)
    assert out.returncode == 0, out.stderr[-2000:]
    mean, std = statistics.mean(accs), statistics.stdev(accs)
    assert "Mean ± std over folds:" in out.stdout
    assert f"{mean:.4f} ± {std:.4f}" in out.stdout


def _job(root, number, params, acc):
    job = root / str(number)
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(
        "".join(f"- {k}={v}\n" for k, v in params.items())
    )
    (job / "results.json").write_text(
        json.dumps({"objective": acc, "val": {"val/acc": acc}, "test": {}})
    )


def test_fold_table_groups_by_the_other_swept_parameters(tmp_path):
    accs = {("simplecnn", 0): 0.90, ("simplecnn", 1): 0.80, ("mlp", 0): 0.70, ("mlp", 1): 0.60}
    for n, ((model, fold), acc) in enumerate(accs.items()):
        _job(tmp_path, n, {"model": model, "data.folds": 2, "data.fold": fold}, acc)
    summarize(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    assert "| mlp | 0,1 | 0.6500 ± 0.0707 |" in text
    assert "| simplecnn | 0,1 | 0.8500 ± 0.0707 |" in text
    rows = [{"params": {"model": "x"}, "objective": 1.0}]
    assert over_folds(rows) == ([], [])  # no data.fold: no fold table
