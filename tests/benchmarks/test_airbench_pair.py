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


def test_work_is_reused_for_the_same_split_and_refused_for_another(benchmark_module, tmp_path):
    pair = benchmark_module("airbench_pair")
    from PIL import Image

    for c in ("a", "b"):
        (tmp_path / "data" / "train" / c).mkdir(parents=True)
        for i in range(10):
            Image.new("RGB", (32, 32), (i * 20, 0, 0)).save(
                tmp_path / "data/train" / c / f"{i}.jpg"
            )
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


def test_first_round_numbers_added_rounds_and_is_checked(benchmark_module, capsys):
    pair = benchmark_module("airbench_pair")
    assert pair.parse_args(["--data", "d", "--first-round", "2"]).first_round == 2
    with pytest.raises(SystemExit):
        pair.parse_args(["--data", "d", "--first-round", "-1"])
    assert "--first-round >= 0, got 10, 2 and -1" in capsys.readouterr().err


def test_set_overrides_come_last_so_they_win(benchmark_module, tmp_path):
    pair = benchmark_module("airbench_pair")
    args = pair.parse_args(["--data", "d", "--set", "trainer.check_val_every_n_epoch=10"])
    out = pair.ours_overrides(tmp_path, 10, 9, 0, 1024, args.set)
    assert out[-2:] == ["trainer.check_val_every_n_epoch=9", "trainer.check_val_every_n_epoch=10"]
    assert pair.ours_overrides(tmp_path, 10, 10, 0, 1024)[-1] == "~callbacks.plots"  # none added


@pytest.mark.slow
def test_quick_trains_airbench_and_the_recipe_on_the_same_images(run_quick):
    out = run_quick("airbench_pair.py", timeout=600)
    assert out["quick"] is True and out["images"] == {"classes": 10, "val": 40, "train": 160}
    (rnd,) = out["rounds"]
    assert rnd["round"] == 0  # its seed
    for name in ("airbench94", "cifar10_fast"):
        assert 0.0 <= rnd[name]["val_acc"] <= 1.0 and rnd[name]["wall_s"] > 0
    ratio = rnd["cifar10_fast"]["wall_s"] / rnd["airbench94"]["wall_s"]
    assert out["wall_ratio"]["per_round"] == [pytest.approx(ratio)]


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
