"""The built wheel carries its configs: installed outside the repo, training runs from /tmp."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installed_outside_the_repo_trains(tmp_path):
    dist, site, work = tmp_path / "dist", tmp_path / "site", tmp_path / "work"
    work.mkdir()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(REPO),
        ],
        check=True,
        cwd=tmp_path,
    )
    wheel = next(dist.glob("lightning_cls-*.whl"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
    )
    assert (site / "lightning_cls" / "conf" / "train.yaml").is_file()
    assert (site / "lightning_cls" / "conf" / "model" / "simplecnn.yaml").is_file()
    # pyproject.toml lists the packages by hand (conf/ is mapped): none may be left out.
    sources = [
        p.relative_to(REPO)
        for top in ("lightning_cls", "hydra_plugins")
        for p in (REPO / top).rglob("*.py")
    ]
    missing = [str(p) for p in sources if "__pycache__" not in p.parts and not (site / p).is_file()]
    assert not missing, (
        f"add their packages to [tool.setuptools] packages in pyproject.toml: {missing}"
    )
    # Only the installed copy is importable: no repo on the path, run from a foreign folder.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    probe = subprocess.run(
        [sys.executable, "-c", "import lightning_cls; print(lightning_cls.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip().startswith(str(site))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_cls.train",
            "trainer.max_epochs=1",
            "trainer.enable_progress_bar=false",
            "~callbacks.progress_bar",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = list((work / "outputs" / "train").glob("*/*/results.json"))
    assert len(results) == 1 and json.loads(results[0].read_text())["test"]["test/acc"] > 0.3
