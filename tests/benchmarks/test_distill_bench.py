"""benchmarks/distill.py: the carved splits, and --quick end to end (teacher, students with and
without distillation, INT8 speed)."""

import io
import tarfile

import pytest


def test_carve_draws_disjoint_train_and_test_per_class(tmp_path, benchmark_module):
    distill = benchmark_module("distill")
    archive = tmp_path / "data.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in ("cat", "dog"):
            for i in range(10):
                info = tarfile.TarInfo(f"train/{name}/{i:04d}.jpg")
                payload = f"{name}{i}".encode()
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    root = tmp_path / "root"
    distill.carve(archive, root, per_class=6, test_per_class=2)
    for name in ("cat", "dog"):
        train = {p.name for p in (root / "train" / name).iterdir()}
        test = {p.name for p in (root / "test" / name).iterdir()}
        assert len(train) == 4 and len(test) == 2 and not train & test
        assert (root / "test" / name / sorted(test)[0]).read_bytes().startswith(name.encode())


@pytest.mark.slow  # three training runs and two INT8 exports: ~25 s on an idle 2-vCPU machine
def test_quick_runs_teacher_students_and_int8(run_quick, tmp_path):
    out = run_quick("distill.py", cwd=tmp_path)
    assert out["quick"] and out["images"] == {"train": 54, "test": 18}
    assert len(out["plain"]) == len(out["distilled"]) == 1
    for row in [out["teacher"], *out["plain"], *out["distilled"]]:
        assert 0.0 <= row["test_acc"] <= 1.0 and row["cpu_s"] > 0
    for model in ("teacher", "student"):
        speed = out["speed"][model]
        assert speed["fp32_ms"] > 0 and speed["int8_ms"] > 0 and speed["int8_mb"] > 0
