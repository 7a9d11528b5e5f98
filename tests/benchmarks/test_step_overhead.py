"""benchmarks/step_overhead.py: paired overhead ratios, the cProfile split and a --quick run."""

import pstats

import pytest


def test_overheads_are_paired_within_each_round(benchmark_module):
    so = benchmark_module("step_overhead")
    # Round 2 is uniformly 2x slower (a busy machine): paired overheads must not move.
    r1 = {"plain": 100.0, "lightning": 90.0, "no_log": 95.0, "no_metrics": 92.0, "user": 80.0}
    r2 = {v: x / 2 for v, x in r1.items()}
    out = so.paired([r1, r2])
    assert out["lightning_overhead"]["per_round"] == pytest.approx([0.1, 0.1])
    assert out["log_share"]["median"] == pytest.approx(1 - 90 / 95)
    assert out["metrics_share"]["median"] == pytest.approx(1 - 90 / 92)
    assert out["user_overhead"]["max"] == pytest.approx(0.2)
    assert set(so.paired([{"plain": 1.0, "lightning": 1.0}])) == {"lightning_overhead"}


def test_split_gives_each_part_its_cumulative_time_and_the_rest_to_the_loop(benchmark_module):
    so = benchmark_module("step_overhead")

    class FakeStats(pstats.Stats):
        def __init__(self, stats):
            self.stats = stats

    # (file, line, function) -> (calls, primitive calls, tottime, cumtime, callers)
    stats = {
        ("/x/site-packages/torch/_tensor.py", 1, "backward"): (10, 10, 0, 0.5, {}),
        ("/x/site-packages/torch/optim/adam.py", 2, "adam"): (10, 10, 0, 0.2, {}),
        ("/x/lightning_cls/module.py", 3, "forward"): (10, 10, 0, 0.2, {}),
        ("/x/site-packages/pytorch_lightning/core/module.py", 4, "log"): (10, 10, 0, 0.05, {}),
        ("/x/other.py", 5, "backward"): (10, 10, 0, 9.0, {}),  # not the part's file
    }
    ms = so.split(FakeStats(stats), seconds=1.0, steps=10)
    assert ms["backward"] == pytest.approx(50.0)
    assert ms["optimizer (Adam update)"] == pytest.approx(20.0)
    assert ms["log (self.log)"] == pytest.approx(5.0)
    assert ms["progress bar"] == 0.0
    assert ms["step (total)"] == pytest.approx(100.0)
    assert ms["Lightning loop + hooks (the rest)"] == pytest.approx(100.0 - 50 - 20 - 20 - 5)


def test_quick_mode_times_every_variant_and_splits_the_step(run_quick):
    out = run_quick("step_overhead.py")
    assert out["quick"] is True and len(out["rounds"]) == 2
    for r in out["rounds"]:
        assert set(r) == {
            "plain", "lightning", "no_log", "no_metrics", "user", "rotation", "outliers"
        }  # fmt: skip
        assert all(v > 0 for v in r.values())
    keys = (
        "lightning_overhead", "log_share", "metrics_share", "user_overhead", "rotation_cost",
        "outliers_cost",
    )  # fmt: skip
    for key in keys:
        assert out[key]["min"] <= out[key]["median"] <= out[key]["max"]
    lightning, user = out["profile_ms_per_step"]["lightning"], out["profile_ms_per_step"]["user"]
    # the network's own work is found in the Lightning run; the user's defaults add a bar
    assert lightning["forward"] > 0 and lightning["backward"] > 0
    assert lightning["metrics (task.update)"] > 0  # train accuracy: counted every step
    # train/loss_step is logged only on the steps the loggers write (every 10th): none of the
    # quick run's 4 steps (warmup included) calls self.log
    assert lightning["log (self.log)"] == 0
    assert lightning["progress bar"] == 0 and user["progress bar"] > 0
    assert user["NanGuard"] > 0
    assert out["profile_ms_per_step"]["plain"]["step (total)"] > 0


def test_stepwise_pairing_times_each_lightning_step_beside_a_bare_one(run_quick):
    out = run_quick(
        "step_overhead.py", "--pairing", "step", "--variants", "lightning", "user", "--hooks"
    )
    assert out["pairing"] == "step" and len(out["rounds"]) == 2
    assert [set(r) for r in out["rounds"]] == [{"lightning", "user"}] * 2
    for key in ("lightning_overhead_stepwise", "user_overhead_stepwise"):
        st = out[key]
        assert st["min"] <= st["median"] <= st["max"]
        assert all(-1 < v < 1 for v in st["per_round"])  # 1 - bare/lightning, both timed
    hooks = out["hook_ms_per_step"]  # each hook of the user run, timed every step
    assert hooks["NanGuard.on_before_optimizer_step"] > 0
    assert hooks["RichProgressBar.on_train_batch_end"] > 0
    assert "_Clock.on_train_batch_end" not in hooks  # the benchmark's own are not timed


def test_user_variant_runs_a_default_train_runs_callbacks(benchmark_module, tmp_path):
    so = benchmark_module("step_overhead")
    callbacks, loggers, trainer = so.user_defaults(str(tmp_path))
    names = {type(c).__name__ for c in callbacks}
    # conf/callbacks/default.yaml's and the one train.py adds (BestMetric)
    assert {"NanGuard", "RichProgressBar", "ModelCheckpoint", "Preemption", "BestMetric"} <= names
    assert [type(lg).__name__ for lg in loggers] == ["CSVLogger"]
    assert trainer["log_every_n_steps"] == 10 and "max_epochs" not in trainer
    assert type(trainer["plugins"][0]).__name__ == "AtomicCheckpointIO"
