"""`make install-dev` (so `make test` and `.ci/run`) installs into the project's own virtual
environment from constraints.txt, the versions the suite last passed with (issue 30)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONSTRAINTS = REPO / "constraints.txt"


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    """constraints.txt as ``{normalized name: version}``; every line is an exact ``==`` pin."""
    found = {}
    for number, line in enumerate(CONSTRAINTS.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;]+)", line)
        assert match, f"constraints.txt:{number} is not an exact pin: {line!r}"
        found[_normalized(match.group(1))] = match.group(3)
    return found


def make_dry_run(*args: str) -> str:
    """What ``make -n ARGS`` would run, as a user's shell would call it (not the variables of a
    ``make refresh-constraints`` that may be running this suite)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(
        ["make", "-n", *args], cwd=REPO, capture_output=True, text=True, check=True, env=env
    ).stdout


def dry_run(target: str) -> list[str]:
    return [line for line in make_dry_run("-B", target).splitlines() if " pip install " in line]


@pytest.mark.parametrize("target", ["install-dev", "install", "docs"])
def test_every_install_of_make_goes_through_the_venv_and_the_constraints(target):
    lines = dry_run(target)
    assert lines, f"make {target} installs nothing?"
    for line in lines:
        assert line.startswith(".venv/bin/python -m pip install"), line  # not the machine's
        assert "-c constraints.txt" in line, line


def test_refresh_resolves_without_constraints_in_a_fresh_venv_and_runs_the_suite_first():
    lines = make_dry_run("refresh-constraints").splitlines()
    assert lines[0] == "rm -rf .venv-refresh"
    rewrite = next(i for i, line in enumerate(lines) if line.startswith("mv constraints.txt.new"))
    suite = next(i for i, line in enumerate(lines) if "docs test VENV=.venv-refresh" in line)
    assert suite < rewrite, "the file must be rewritten only after the suite passed"
    assert "CONSTRAINTS=" in lines[suite] and "-c constraints" not in lines[suite]


def test_the_constraints_pin_torch_as_the_makefile_does_and_every_declared_package():
    pinned = pins()
    makefile = (REPO / "Makefile").read_text()
    for name, version in re.findall(r"(?<![\w-])(torch|torchvision)==([\d.]+)", makefile):
        assert pinned[name] == version, f"Makefile pins {name}=={version}, constraints.txt not"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    # litert-convert goes into an environment of its own (make venv-litert, which pins
    # litert-torch in the Makefile): its xdsl needs an older typing-extensions than ours.
    extras = project["optional-dependencies"]
    for items in (v for k, v in extras.items() if k != "litert-convert"):
        requirements += [r for r in items if not r.startswith("lightning-cls")]
    for requirement in requirements:
        name = _normalized(re.match(r"[A-Za-z0-9._-]+", requirement).group(0))
        assert name in pinned, f"pyproject requires {requirement!r}; constraints.txt lacks it"


def test_the_suite_runs_on_the_pinned_versions():
    """Where the suite runs in the project's venv (`make test`, and always under CI), every
    installed distribution that constraints.txt names is at its pinned version."""
    in_project_venv = Path(sys.prefix).resolve() == (REPO / ".venv").resolve()
    if not in_project_venv:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the suite through `make test` (sys.prefix={sys.prefix})")
        pytest.skip("not run from the project's .venv (`make test` does that)")
    wrong = {}
    for name, version in pins().items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue  # pinned for an extra this environment did not install (e.g. docs)
        if installed.split("+")[0] != version.split("+")[0]:
            wrong[name] = f"{installed} installed, {version} pinned"
    assert not wrong, f"not the pinned versions: {wrong}; run `make install-dev`"
