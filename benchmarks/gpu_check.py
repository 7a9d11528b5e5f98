"""The checks that need a CUDA GPU, in one script (meant to fit in 10 minutes on one GPU).

    python benchmarks/gpu_check.py                  # on a machine with a CUDA GPU
    python benchmarks/gpu_check.py --data /path/to/cifar10-train-jpg.tar.gz
    python benchmarks/gpu_check.py --quick          # CPU dry run: the plan, a tiny smoke of each step

Steps (``STEPS``), each a command run in a child process, in this order:

    tests        pytest on the tests of the GPU-relevant code paths (``TEST_PATHS`` filtered by
                 ``-k TEST_KEYWORDS``): device placement, bf16/fp16 autocast, torch.compile,
                 channels_last, batched augmentation on the batch's device, export and serving
                 (the ONNX tests pick the CUDA execution provider where onnxruntime-gpu is
                 installed); tests that skip without CUDA run here.
    cifar10_fast ``experiment=cifar10_fast trainer=gpu`` on CIFAR-10's JPEGs (``--data``: the
                 archive or an unpacked folder), timed to 94% validation accuracy by
                 ``benchmarks/time_to_accuracy.py`` (WallClock's elapsed seconds per validation).

airbench94 is not timed: ``benchmarks/third_party/airbench94.py`` is the copy changed to run on
the CPU in float32 (its header lists the changes), so it would not be airbench's GPU time.

Without a CUDA GPU (and without ``--quick``) the script prints one line and exits 1. ``--quick``
runs on the CPU: it prints the plan, collects the test selection (``pytest --collect-only``) and
trains the cifar10_fast recipe for one tiny epoch on synthetic data with ``trainer=cpu`` through
the same time-to-accuracy path. Written in a session without a GPU: only ``--quick`` has run.
The last output line is one JSON object: per step its command, exit code and seconds (and the
time to 94% where reached).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_PATHS = [
    "tests/training/test_precision.py",
    "tests/training/test_trainer_builder.py",
    "tests/callbacks/test_compile.py",
    "tests/callbacks/test_oom.py",
    "tests/data/test_augment.py",
    "tests/data/test_batch_hook.py",
    "tests/models/test_airbench.py",
    "tests/export/test_onnx.py",
    "tests/export/test_onnx_e2e.py",
    "tests/inference/test_artifacts.py",
]
TEST_KEYWORDS = (
    "cuda or gpu or device or bf16 or fp16 or autocast or precision or compile or channels_last "
    "or augment or provider or onnx or export or batch"
)
TARGET = 0.94
RECIPE = "experiment=cifar10_fast"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--data",
        type=Path,
        default=REPO.parent / "shared/data/cifar10-train-jpg.tar.gz",
        help="CIFAR-10 JPEGs: the .tar.gz or a folder holding train/<class>/*.jpg",
    )
    p.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temp one)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per step at most")
    p.add_argument("--quick", action="store_true", help="CPU dry run: plan + tiny smoke per step")
    return p.parse_args(argv)


def cifar_root(data: Path, work: Path) -> Path:
    """A folder with train/<class>/*.jpg: ``data`` itself, or the archive unpacked in ``work``."""
    if data.is_dir():
        return data
    if not data.is_file():
        raise FileNotFoundError(
            f"--data {data} does not exist; pass CIFAR-10's JPEG archive or unpacked folder."
        )
    root = work / "cifar10"
    if not (root / "train").is_dir():
        root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(data) as tar:
            tar.extractall(root, filter="data")
    return root


def steps(quick: bool, data_root: Path | None, work: Path) -> dict[str, list[str]]:
    """Step name -> the command (argv) that runs it; ``quick``: the CPU smoke of each."""
    # $BENCH_PYTHON: the test suite's pre-imported interpreter shim (time_to_accuracy.py's too)
    py = shlex.split(os.environ.get("BENCH_PYTHON", "")) or [sys.executable]
    tests = [*py, "-m", "pytest", "-p", "no:randomly", "-q", "-n", "0", *TEST_PATHS]
    tests += ["-k", TEST_KEYWORDS]
    if quick:
        tests.append("--collect-only")
        recipe = f"{RECIPE} trainer=cpu data=synthetic data.train_size=256 data.test_size=64 "
        recipe += "data.batch_size=64 trainer.max_epochs=1 trainer.check_val_every_n_epoch=1 "
        recipe += "optimizer.lr=0.1 seed=0"
        target = "0.0"
    else:
        recipe = f"{RECIPE} trainer=gpu data=imagefolder data.root={data_root} "
        recipe += "data.num_classes=10 data.val_size=5000 data.test_size=5000"
        target = str(TARGET)
    time_to = [*py, str(REPO / "benchmarks/time_to_accuracy.py"), "--train"]
    time_to += [f"cifar10_fast={recipe}", "--target", target, "--root", str(work / "runs")]
    return {"tests": tests, "cifar10_fast": time_to}


def run(name: str, argv: list[str], timeout: int) -> dict:
    """Run one step; its exit code, seconds, output tail and (time_to_accuracy) result."""
    print(f"== {name}: {' '.join(argv)}", flush=True)
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        code, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as err:
        code, out = 124, f"timed out after {timeout} s: {err}"
    seconds = round(time.perf_counter() - start, 1)
    tail = out.strip().splitlines()[-15:]
    print("\n".join(tail), flush=True)
    result = {"command": argv, "returncode": code, "seconds": seconds}
    if name == "tests":
        result["tests"] = sum(1 for line in out.splitlines() if "::" in line)
    if name == "cifar10_fast" and code == 0:
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        reached = summary["runs"]["cifar10_fast"]["time_to_target"]
        result["time_to_target_s"] = reached["wall_s"] if reached else None
        result["best_val_acc"] = summary["runs"]["cifar10_fast"]["best_val_acc"]
    return result


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch  # here, so that --help stays light

    if not args.quick and not torch.cuda.is_available():
        print(
            "gpu_check: no CUDA GPU here (torch.cuda.is_available() is False); run it on a "
            "machine with one, or pass --quick for the CPU dry run.",
            file=sys.stderr,
        )
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        data_root = None if args.quick else cifar_root(args.data, work)
        plan = steps(args.quick, data_root, work)
        print("Plan:", *(f"  {name}: {' '.join(cmd)}" for name, cmd in plan.items()), sep="\n")
        results = {name: run(name, cmd, args.timeout) for name, cmd in plan.items()}
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (dry run)"
    ok = all(r["returncode"] == 0 for r in results.values())
    print(json.dumps({"quick": args.quick, "device": device, "ok": ok, "steps": results}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
