"""benchmarks/airbench_pair.py: the shared split, its errors, and --quick (both trainings)."""

import pytest


def test_the_split_is_the_ablation_carve_and_never_reads_the_holdout(benchmark_module):
    pair = benchmark_module("airbench_pair")
    import torch

    parts = pair.carve(500, holdout=50, val_size=50, train_size=100)
    held = set(torch.randperm(500, generator=torch.Generator().manual_seed(0))[:50].tolist())
    val, train = set(parts["val"]), set(parts["train"])
    assert len(val) == 50 and len(train) == 100 and not val & train
    assert not (val | train) & held
    assert len(pair.carve(500, 50, 50, None)["train"]) == 400  # the rest when not given
    with pytest.raises(ValueError, match="--train-size 401: between 1 and 400"):
        pair.carve(500, 50, 50, 401)
    with pytest.raises(ValueError, match="--holdout 300 \\+ --val-size 200 leave no training"):
        pair.carve(500, 300, 200, None)


def test_a_data_folder_without_train_is_named(benchmark_module, tmp_path):
    pair = benchmark_module("airbench_pair")
    args = pair.parse_args(["--data", str(tmp_path)])
    with pytest.raises(ValueError, match=f"--data {tmp_path} has no train/ folder"):
        pair.write_split(tmp_path, tmp_path / "work", args)


def _two_classes_of_ten(data):
    """``data/train/{a,b}/0..9.jpg``: 20 small JPEGs."""
    from PIL import Image

    for c in ("a", "b"):
        (data / "train" / c).mkdir(parents=True)
        for i in range(10):
            Image.new("RGB", (32, 32), (i * 20, 0, 0)).save(data / "train" / c / f"{i}.jpg")


def test_work_is_reused_for_the_same_split_and_refused_for_another(benchmark_module, tmp_path):
    pair = benchmark_module("airbench_pair")
    _two_classes_of_ten(tmp_path / "data")
    work = tmp_path / "work"
    argv = ["--data", str(tmp_path / "data"), "--holdout", "4", "--val-size", "4"]
    args = pair.parse_args(argv)
    counts = pair.write_split(args.data, work, args)
    assert counts == {"classes": 2, "val": 4, "train": 12}
    stamp = (work / "airbench/cifar10/train.pt").stat().st_mtime_ns
    assert pair.write_split(args.data, work, args) == counts  # a second round: reused
    assert (work / "airbench/cifar10/train.pt").stat().st_mtime_ns == stamp
    other = pair.parse_args([*argv, "--train-size", "6"])
    with pytest.raises(ValueError, match=f"--work {work} holds another split"):
        pair.write_split(other.data, work, other)
    assert (work / "airbench/cifar10/train.pt").stat().st_mtime_ns == stamp  # nothing lost


def test_our_caches_are_warmed_before_any_timing(benchmark_module, tmp_path):
    """airbench94's decode happens outside its timing (write_split): ours too, so the first
    round's run reads a decoded cache and hashed files as every later round's does."""
    pair = benchmark_module("airbench_pair")
    _two_classes_of_ten(tmp_path / "data")
    work = tmp_path / "work"
    args = pair.parse_args(["--data", str(tmp_path / "data"), "--holdout", "4", "--val-size", "4"])
    counts = pair.write_split(args.data, work, args)
    cache = work / "split" / ".lightning_cls_cache"
    assert not cache.exists()
    pair.warm_caches(pair.ours_overrides(work, counts["classes"], 1, 0, 8))
    assert {p.name.split("-")[0] for p in cache.glob("*.npy")} == {"train", "val", "test"}
    assert list(cache.glob("fingerprint-*.json"))


def test_first_round_numbers_added_rounds_and_is_checked(benchmark_module, capsys):
    pair = benchmark_module("airbench_pair")
    assert pair.parse_args(["--data", "d", "--first-round", "2"]).first_round == 2
    with pytest.raises(SystemExit):
        pair.parse_args(["--data", "d", "--first-round", "-1"])
    assert "--first-round >= 0, got 10, 3 and -1" in capsys.readouterr().err


def test_ours_validates_once_at_the_end_and_set_overrides_come_last(benchmark_module, tmp_path):
    pair = benchmark_module("airbench_pair")
    out = pair.ours_overrides(tmp_path, 10, 10, 0, 1024)
    assert "trainer.check_val_every_n_epoch=10" in out  # even epochs too: only the last one
    assert "+trainer.num_sanity_val_steps=0" in out  # and no sanity-check batches before it
    assert pair.parse_args(["--data", "d"]).rounds == 3
    args = pair.parse_args(["--data", "d", "--set", "trainer.precision=32-true"])
    assert (
        pair.ours_overrides(tmp_path, 10, 9, 0, 1024, args.set)[-1] == "trainer.precision=32-true"
    )


def test_airbench_follows_our_precision(benchmark_module, monkeypatch):
    pair = benchmark_module("airbench_pair")
    from lightning_cls.training import precision

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert pair.ours_precision() == "bf16-mixed"  # the recipe's auto where bf16 is native
    assert pair.ours_precision(["trainer.precision=32-true"]) == "32-true"
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert pair.ours_precision() == "32-true"
    monkeypatch.setenv(pair.AIRBENCH_BF16_ENV, "1")  # not inherited: set per run from ours
    assert pair.AIRBENCH_BF16_ENV not in pair.child_env(None)


def _round(r, a_acc, a_wall, b_acc, b_wall):
    return {
        "round": r,
        "airbench94": {"val_acc": a_acc, "wall_s": a_wall, "train_cpu_s": a_wall - 10},
        "cifar10_fast": {"val_acc": b_acc, "wall_s": b_wall, "train_cpu_s": b_wall - 10},
    }


def test_the_summary_is_per_round_ratios_and_point_differences(benchmark_module):
    pair = benchmark_module("airbench_pair")
    rounds = [
        _round(0, 0.9000, 100.0, 0.8995, 95.0),  # 0.95x, -0.05 points: meets the goal
        _round(1, 0.9010, 100.0, 0.8990, 90.0),  # 0.90x, -0.20 points: too inaccurate
        _round(2, 0.9000, 100.0, 0.9020, 110.0),  # 1.10x, +0.20 points: too slow
    ]
    s = pair.pair_summary(rounds)
    assert s["wall_ratio"]["per_round"] == pytest.approx([0.95, 0.90, 1.10])
    assert (s["wall_ratio"]["median"], s["wall_ratio"]["min"], s["wall_ratio"]["max"]) == (
        pytest.approx(0.95),
        pytest.approx(0.90),
        pytest.approx(1.10),
    )
    assert s["cpu_ratio"]["per_round"] == pytest.approx([85 / 90, 80 / 90, 100 / 90])
    assert s["acc_diff_points"]["per_round"] == pytest.approx([-0.05, -0.20, 0.20])
    assert s["acc_diff_points"]["median"] == pytest.approx(-0.05)
    assert s["goal"]["met"] is True and s["goal"]["rounds_met"] == 1
    assert pair.goal_line(s).startswith(
        "goal (ours <= 1.0x airbench94's wall at >= its accuracy - 0.1 points, on the medians): "
        "MET: wall ratio 0.950 [0.900, 1.100]x, accuracy difference -0.05 [-0.20, +0.20] points "
        "(1 of 3 rounds meet it)"
    )
    slower = pair.pair_summary([_round(0, 0.9, 100.0, 0.9, 100.5)])  # 1.005x: over the bar
    assert slower["goal"]["met"] is False
    assert "NOT met" in pair.goal_line(slower)
    short = pair.pair_summary([_round(0, 0.9, 100.0, 0.8985, 90.0)])  # -0.15 points
    assert short["goal"]["met"] is False
    edge = pair.pair_summary([_round(0, 0.9, 100.0, 0.899, 100.0)])  # exactly -0.1, 1.0x
    assert edge["goal"]["met"] is True


@pytest.mark.slow
def test_quick_trains_airbench_and_the_recipe_on_the_same_images(run_quick):
    out = run_quick("airbench_pair.py", timeout=600)
    assert out["quick"] is True and out["images"] == {"classes": 10, "val": 40, "train": 160}
    (rnd,) = out["rounds"]
    assert rnd["round"] == 0  # its seed
    for name in ("airbench94", "cifar10_fast"):
        assert 0.0 <= rnd[name]["val_acc"] <= 1.0 and rnd[name]["wall_s"] > 0
    assert rnd["order"] == ["airbench94", "cifar10_fast"]  # round 0: airbench first
    ratio = rnd["cifar10_fast"]["wall_s"] / rnd["airbench94"]["wall_s"]
    assert out["wall_ratio"]["per_round"] == [pytest.approx(ratio)]
    diff = 100 * (rnd["cifar10_fast"]["val_acc"] - rnd["airbench94"]["val_acc"])
    assert out["acc_diff_points"]["per_round"] == [pytest.approx(diff, abs=1e-4)]
    ours = rnd["cifar10_fast"]
    assert ours["validations"] == 1 and ours["validated_epoch"] == 1  # once, at the end
    assert ours["tta"] == {"mode": "full", "flip": True, "translate": 1}  # airbench's level 2
    want = "bf16" if out["cpu"]["native_bf16"] else "fp32"
    assert rnd["airbench94"]["precision"].startswith(want)
    assert ours["precision"] == ("bf16-mixed" if want == "bf16" else "32-true")
    assert isinstance(out["goal"]["met"], bool)


def test_a_bad_data_folder_is_one_line_and_exit_1(tmp_path, fork_env):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "airbench_pair.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--data", str(tmp_path)],
        capture_output=True, text=True, env=fork_env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"error: --data {tmp_path} has no train/ folder; point it at DATA with "
        "DATA/train/<class>/*.jpg (e.g. CIFAR-10's JPEGs)."
    ]
