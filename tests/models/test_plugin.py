"""A third-party package adds a model through the entry-point group and trains by name."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_plugin_package_installs_and_trains_by_name(tmp_path):
    target, source = tmp_path / "site", tmp_path / "plugin"
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources.
    shutil.copytree(REPO / "examples" / "custom_model_plugin", source)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(REPO)])}
    cmd = [
        sys.executable,
        "-m",
        "lightning_cls.train",
        "model=custom",
        "model.name=tinynet",
        "+model.width=8",
        "trainer.max_epochs=1",
        "trainer.enable_progress_bar=false",
        "~callbacks.progress_bar",
        f"paths.root_dir={tmp_path}",
        f"hydra.run.dir={tmp_path}/run",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["test"]["test/acc"] > 0.0
    config = (tmp_path / "run" / "config_resolved.yaml").read_text()
    assert "name: tinynet" in config
