"""benchmarks/time_to_accuracy.py: time to target, ratios to the baseline, and --quick."""

import json

import pytest


def _run_dir(tmp_path, name, rows, test_acc=None, every=1):
    run = tmp_path / name
    (run / "csv").mkdir(parents=True)
    lines = ["epoch,time/elapsed_s,time/cpu_s,val/acc,train/loss_epoch"]
    lines += [
        f"{(i + 1) * every - 1},{wall},{cpu},{acc}," for i, (wall, cpu, acc) in enumerate(rows)
    ]
    lines += ["0,,,,1.5"]  # a training row without validation columns is skipped
    (run / "csv" / "metrics.csv").write_text("\n".join(lines) + "\n")
    if test_acc is not None:
        (run / "results.json").write_text(json.dumps({"test": {"test/acc": test_acc}}))
    return run


def test_time_to_target_and_ratios(tmp_path, benchmark_module):
    tta = benchmark_module("time_to_accuracy")
    fast = _run_dir(tmp_path, "fast", [(10, 18, 0.8), (20, 38, 0.91), (30, 58, 0.92)], 0.915)
    slow = _run_dir(tmp_path, "tutorial", [(25, 45, 0.6), (50, 95, 0.75)])
    figures = {n: tta.summarize_run(d, 0.9) for n, d in {"fast": fast, "tutorial": slow}.items()}
    assert figures["fast"]["time_to_target"] == {"epoch": 2, "wall_s": 20.0, "cpu_s": 38.0}
    assert figures["tutorial"]["time_to_target"] is None
    assert figures["fast"]["test_acc"] == 0.915 and figures["tutorial"]["test_acc"] is None
    assert figures["fast"]["best_val_acc"] == 0.92
    assert tta.ratios(figures, "tutorial") == {"fast": {"wall": 0.4, "cpu": 0.4}}
    with pytest.raises(ValueError, match="--baseline 'nope' is not one of the runs: fast"):
        tta.ratios(figures, "nope")
    with pytest.raises(ValueError, match="--run takes NAME=VALUE, got 'oops'"):
        tta.parse_pairs(["oops"], "--run")


def test_target_met_exactly_in_float32_and_epochs_from_the_log(tmp_path, benchmark_module):
    tta = benchmark_module("time_to_accuracy")
    # Validation every 2nd epoch; 4,500/5,000 correct as Lightning logs it (float32).
    run = _run_dir(tmp_path, "every2", [(10, 20, 0.85), (20, 40, 0.8999999761581421)], every=2)
    assert tta.summarize_run(run, 0.90)["time_to_target"] == {
        "epoch": 4,
        "wall_s": 20.0,
        "cpu_s": 40.0,
    }
    assert tta.summarize_run(run, 0.9001)["time_to_target"] is None


def test_a_log_without_validation_rows_is_named(tmp_path, benchmark_module):
    tta = benchmark_module("time_to_accuracy")
    run = _run_dir(tmp_path, "empty", [])
    with pytest.raises(ValueError, match="empty/csv/metrics.csv has no val/acc"):
        tta.read_curve(run)


@pytest.mark.slow
def test_quick_mode_trains_both_recipes_and_prints_json(run_quick):
    out = run_quick("time_to_accuracy.py", timeout=900)
    assert out["quick"] is True and set(out["runs"]) == {"fast", "tutorial"}
    for run in out["runs"].values():
        assert run["epochs"] == 2 and run["train_wall_s"] > 0 and run["train_cpu_s"] > 0
        assert 0.0 <= run["test_acc"] <= 1.0
