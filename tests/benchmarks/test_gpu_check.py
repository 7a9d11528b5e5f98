"""benchmarks/gpu_check.py: one clear line without a GPU, and the --quick CPU dry run."""

import pytest


def test_without_a_gpu_it_fails_in_one_line(benchmark_module, monkeypatch, capsys):
    gc = benchmark_module("gpu_check")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert gc.main([]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no CUDA GPU" in err and "--quick" in err


def test_the_gpu_plan_trains_the_recipe_on_the_gpu_to_94(benchmark_module, tmp_path):
    gc = benchmark_module("gpu_check")
    plan = gc.steps(quick=False, data_root=tmp_path / "cifar10", work=tmp_path)
    assert "--collect-only" not in plan["tests"]
    recipe = " ".join(plan["cifar10_fast"])
    assert "experiment=cifar10_fast trainer=gpu" in recipe and f"data.root={tmp_path}" in recipe
    assert plan["cifar10_fast"][plan["cifar10_fast"].index("--target") + 1] == "0.94"
    with pytest.raises(FileNotFoundError, match="--data .* does not exist"):
        gc.cifar_root(tmp_path / "missing.tar.gz", tmp_path)


@pytest.mark.slow
def test_quick_dry_run_collects_the_tests_and_smokes_the_recipe(run_quick):
    out = run_quick("gpu_check.py", timeout=600)
    assert out["quick"] is True and out["ok"] is True
    assert out["steps"]["tests"]["tests"] > 10  # the selection resolves to real tests
    assert "--collect-only" in out["steps"]["tests"]["command"]
    smoke = out["steps"]["cifar10_fast"]
    assert smoke["returncode"] == 0 and "trainer=cpu" in " ".join(smoke["command"])
    assert 0.0 <= smoke["best_val_acc"] <= 1.0
