"""An export killed at any moment leaves every final-named file complete and loadable.

``python -m lightning_cls.export`` (ONNX, TorchScript, .pt2, OpenVINO, INT8 of each) runs into
one folder and is SIGKILLed at seeded random moments, several times over the same folder (so
later runs replace files earlier ones finished). After each kill every file under a final
name must load; anything else must be a hidden temp file (``fileio.is_temp_file``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from lightning_cls.fileio import is_temp_file
from lightning_cls.inference import load_artifact

SYNTHETIC = [  # the `trained` fixture's data (see test_entry_point.py)
    "data=synthetic",
    "data.num_classes=4",
    "data.image_size=16",
    "data.train_size=384",
    "data.test_size=64",
    "data.val_size=128",
    "+data.noise=0.8",
    "seed=0",
]
FINAL_NAMES = {
    "meta.json",
    "quantization_report.json",
    "model.onnx",
    "model_int8.onnx",
    "model_trace.torchscript",
    "model_script.torchscript",
    "model_int8_dynamic.torchscript",
    "model.pt2",
    "model.xml",
    "model.bin",
    "model_int8.xml",
    "model_int8.bin",
}


def _command(ckpt, out, tmp_path):
    return [
        sys.executable,
        "-m",
        "lightning_cls.export",
        f"ckpt_path={ckpt}",
        "export=openvino",
        "export.formats=[onnx,torchscript,pt2,openvino]",
        "export.quantize.static=true",
        "export.quantize.dynamic=true",
        "export.quantize.latency_runs=2",
        "export.quantize.calibration_batches=2",
        f"output_dir={out}",
        f"paths.root_dir={tmp_path}",
        f"paths.output_dir={tmp_path}/run",
        *SYNTHETIC,
    ]


def _check_folder(out) -> list[str]:
    """Load every final-named file; return the names that were there."""
    names = sorted(p.name for p in out.iterdir()) if out.exists() else []
    final = [n for n in names if not is_temp_file(n)]
    assert set(final) <= FINAL_NAMES, f"unexpected files: {set(final) - FINAL_NAMES}"
    for name in final:
        path = out / name
        if name.endswith(".json"):
            json.loads(path.read_text())
        elif name.endswith(".bin"):
            continue  # loaded with its .xml (a lone .bin is never opened)
        else:
            predictor = load_artifact(path, trust_artifact=True)
            assert predictor.spec.num_classes == 4, name
    return final


@pytest.mark.slow
def test_an_export_killed_at_random_moments_leaves_only_complete_files(trained, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    full = tmp_path / "full"
    start = time.perf_counter()
    done = subprocess.run(
        _command(trained.ckpt, full, tmp_path), env=env, capture_output=True, text=True, timeout=600
    )
    duration = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(_check_folder(full)) == FINAL_NAMES  # a finished export writes every file
    out = tmp_path / "killed"
    seen = set()
    for seed in range(3):
        delay = random.Random(seed).uniform(0.25 * duration, 0.95 * duration)
        proc = subprocess.Popen(
            _command(trained.ckpt, out, tmp_path),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(delay)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        seen |= set(_check_folder(out))
    assert len(seen) >= 3, f"the kills all came too early to test anything: {seen}"
