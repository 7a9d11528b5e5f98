"""An export killed at any moment leaves every final-named file complete and loadable.

``python -m lightning_cls.export`` (ONNX, TorchScript, .pt2, OpenVINO, INT8 of each) runs into
one folder and is SIGKILLed in the middle of writing a file (while a temp file is in the
folder), twice over the same folder (the second kill lands while files the first run finished
are being replaced), then runs to the end there. After each kill every file under a final name
must load; anything else must be a hidden temp file (``fileio.is_temp_file``). The finished run
must write every file, over what the killed runs left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from artifact_helpers import SYNTHETIC_OVERRIDES as SYNTHETIC  # the `trained` fixture's data
from lightning_cls.fileio import is_temp_file
from lightning_cls.inference import load_artifact

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


def _kill_mid_write(command, out, env, min_final: int) -> bool:
    """Run ``command``; SIGKILL it the moment a temp file shows in ``out`` while at least
    ``min_final`` final-named files are there. True if it was killed before it finished."""
    proc = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        while proc.poll() is None:
            names = [p.name for p in out.iterdir()] if out.exists() else []
            temps = [n for n in names if is_temp_file(n)]
            if temps and len(names) - len(temps) >= min_final:
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.005)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    return proc.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_an_export_killed_mid_write_leaves_only_complete_files(trained, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = tmp_path / "out"
    command = _command(trained.ckpt, out, tmp_path)
    # First kill: a few files done, the next one half written.
    assert _kill_mid_write(command, out, env, min_final=3), "the export finished before the kill"
    first = set(_check_folder(out))
    assert len(first) >= 3, first
    # Second kill, over the same folder: it has replaced the first run's files, and goes further.
    assert _kill_mid_write(command, out, env, min_final=len(first) + 3), "finished before the kill"
    second = set(_check_folder(out))
    assert second > first, (first, second)
    # The export then runs to the end over what the kills left, and writes every file.
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(_check_folder(out)) == FINAL_NAMES
