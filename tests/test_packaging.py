"""The built wheel carries its configs: installed outside the repo, training runs from /tmp.
And the oldest supported Python is one number everywhere it is written."""

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
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


def _min_python() -> dict[str, str]:
    """The oldest supported Python as each place declares it."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    makefile = (REPO / "Makefile").read_text()
    found = {
        "pyproject requires-python": project["project"]["requires-python"].removeprefix(">="),
        "ruff target-version": project["tool"]["ruff"]["target-version"].replace("py3", "3.", 1),
        "Makefile MIN_PYTHON": re.search(r"^MIN_PYTHON := (\S+)$", makefile, re.M).group(1),
    }
    for doc in ("README.md", "docs/index.md"):
        said = re.findall(r"Python ≥ (3\.\d+)", (REPO / doc).read_text())
        assert said, f"{doc} no longer says which Python it needs (Python ≥ 3.x)"
        for i, version in enumerate(said):
            found[f"{doc} ({i + 1})"] = version
    return found


def test_the_oldest_python_is_declared_once_everywhere():
    """constraints.txt pins numpy and scipy releases that need 3.11, and tests import tomllib:
    pyproject, ruff, the Makefile's check and the docs all say 3.11, and this Python meets it."""
    found = _min_python()
    assert set(found.values()) == {"3.11"}, found
    assert sys.version_info[:2] >= (3, 11)


def test_make_refuses_an_older_python_before_creating_the_venv(tmp_path):
    """The Makefile's check, run for real: told that 3.99 is the minimum, this Python is too old,
    so make stops in one line naming both and creates no environment; at the declared minimum
    it creates one."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    venv = tmp_path / "venv"
    args = ["make", f"PYTHON={sys.executable}", f"VENV={venv}", f"{venv}/bin/python"]
    old = subprocess.run(
        [*args, "MIN_PYTHON=3.99"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert old.returncode != 0 and not venv.exists(), old.stdout + old.stderr
    mine = "{}.{}".format(*sys.version_info[:2])
    assert f"is Python {mine}; lightning_cls needs Python >= 3.99" in old.stderr, old.stderr
    ok = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True)  # 3.11: passes
    assert ok.returncode == 0 and (venv / "bin" / "python").exists(), ok.stdout + ok.stderr
