"""Every package the tests and benchmarks import is declared in an extra that `make test`
installs (issue 19: psutil was imported by the serving tests and declared nowhere, so
`pip install -e '.[dev,serve]'` could not collect tests/serve).

Static: the imports of tests/ and benchmarks/ are parsed (``import``, ``from ... import`` and
``pytest.importorskip("...")``), mapped to their distributions with
``importlib.metadata.packages_distributions``, and compared with the requirements of
pyproject.toml's core dependencies plus the extras the Makefile's ``install-dev`` names.
Declared means listed directly: a package that arrives only as another package's dependency
can disappear with that package's next release.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCANNED = ("tests", "benchmarks")
# Files that run in environments of their own, never the project's: the serving peers of
# benchmarks/serve_peers.py (MLServer, KServe), installed by `make venv-peers` because their pins
# clash with the project's (the Makefile target is checked below).
OWN_ENVIRONMENTS = ("benchmarks/peers",)
PROJECT = "lightning-cls"


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def make_test_extras() -> list[str]:
    """The extras `make test` installs: the ``.[...]`` of the Makefile's install-dev recipe."""
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^install-dev:.*?(?=^\S)", makefile, re.M | re.S)
    assert recipe, "Makefile has no install-dev target"
    found = re.search(r"""-e\s+["']?\.\[([^\]]+)\]""", recipe.group(0))
    assert found, "install-dev does not install the project with extras (-e .[...])"
    return [e.strip() for e in found.group(1).split(",")]


def declared(extras: list[str]) -> set[str]:
    """Distributions listed in the core dependencies and ``extras`` (following
    ``lightning-cls[other]`` self-references), normalized; the project itself included."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    names, todo, seen = {PROJECT}, list(extras), set()
    requirements = list(project.get("dependencies", []))
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        assert extra in optional, f"make test installs the extra '{extra}', which pyproject lacks"
        seen.add(extra)
        requirements += optional[extra]
    for requirement in requirements:
        name = _normalized(re.match(r"[A-Za-z0-9._-]+", requirement).group(0))
        if name == PROJECT:
            inner = re.search(r"\[([^\]]+)\]", requirement)
            todo = [e.strip() for e in inner.group(1).split(",")] if inner else []
            names |= declared(todo) if todo else set()
        names.add(name)
    return names


def imports(path: Path) -> set[str]:
    """Absolute module names imported by one file (importorskip'd ones included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", None) == "importorskip"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.add(node.args[0].value)
    return found


def local_modules() -> set[str]:
    """Helper modules the tests import from their own folders (on sys.path under pytest), and
    the folders themselves: ``tests/cluster/`` is importable as the namespace package ``cluster``
    (``from cluster.train_runs import ...``)."""
    names = {"conftest"}
    for folder in SCANNED:
        for path in (REPO / folder).rglob("*"):
            if path.suffix == ".py" or (path.is_dir() and any(path.glob("*.py"))):
                names.add(path.stem)
    return names


def distributions_of(module: str, index: dict[str, list[str]]) -> set[str]:
    """The installed distributions that provide ``module``. A namespace shared by several
    (``google``, ``hydra_plugins``) is narrowed to those holding the dotted submodule."""
    top, *rest = module.split(".")
    candidates = set(index.get(top, []))
    if len(candidates) > 1 and rest:
        prefix = f"{top}/{rest[0]}"
        owners = {
            dist
            for dist in candidates
            if any(
                str(f).startswith(prefix + "/") or str(f) == prefix + ".py"
                for f in metadata.files(dist) or []
            )
        }
        candidates = owners or candidates
    return {_normalized(d) for d in candidates}


def undeclared_imports() -> dict[str, list[str]]:
    """``{module: [files]}`` of third-party imports whose distribution is not declared in
    what `make test` installs. A module a test writes itself (``tmp_path / "name.py"``) is
    local; one it only ``importorskip``s may come from any extra (``ray``: the Ray Serve
    example's test runs where that extra is installed)."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"].get(
        "optional-dependencies", {}
    )
    allowed, anywhere = declared(make_test_extras()), declared(list(extras))
    index = metadata.packages_distributions()
    local = local_modules()
    missing: dict[str, list[str]] = {}
    for folder in SCANNED:
        for path in sorted((REPO / folder).rglob("*.py")):
            if str(path.relative_to(REPO)).startswith(OWN_ENVIRONMENTS):
                continue
            text = path.read_text()
            optional = {m for m in imports(path) if f'importorskip("{m}"' in text}
            for module in sorted(imports(path)):
                top = module.split(".")[0]
                if top in sys.stdlib_module_names or top in local or f'"{top}.py"' in text:
                    continue
                dists = distributions_of(module, index)
                if not dists & (anywhere if module in optional else allowed):
                    where = str(path.relative_to(REPO))
                    missing.setdefault(module, []).append(where)
    return missing


def test_every_import_of_the_tests_and_benchmarks_is_declared():
    missing = undeclared_imports()
    assert not missing, (
        "Imported by the tests/benchmarks but in no extra that `make test` installs "
        f"({', '.join(make_test_extras())}); add each to the right extra in pyproject.toml: "
        + "; ".join(f"{m} ({', '.join(files)})" for m, files in missing.items())
    )


def test_the_check_finds_an_undeclared_import(tmp_path, monkeypatch):
    """psutil, imported and not declared, is reported (the case issue 19 found)."""
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("import psutil\nimport helper\nimport torch\n")
    (tmp_path / "tests" / "helper.py").write_text("")
    (tmp_path / "Makefile").write_text('install-dev:\n\tpip install -e ".[dev]"\n\ntest:\n')
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "lightning-cls"\ndependencies = ["torch>=2"]\n'
        '[project.optional-dependencies]\ndev = ["pytest", "lightning-cls[extra]"]\n'
        'extra = ["numpy"]\n'
    )
    assert declared(make_test_extras()) == {"lightning-cls", "torch", "pytest", "numpy"}
    assert undeclared_imports() == {"psutil": ["tests/test_x.py"]}


def test_files_in_their_own_environments_have_a_make_target():
    """benchmarks/peers/ is skipped above only because `make venv-peers` installs what it
    imports (mlserver, kserve), each in its own environment."""
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^venv-peers:.*?(?=^\S)", makefile, re.M | re.S)
    assert recipe, "Makefile has no venv-peers target"
    assert "mlserver==" in recipe.group(0) and "kserve==" in recipe.group(0)
    for path in (REPO / "benchmarks" / "peers").glob("*.py"):
        top = {m.split(".")[0] for m in imports(path)} - set(sys.stdlib_module_names)
        local = {p.stem for p in (REPO / "benchmarks" / "peers").glob("*.py")}
        assert top - local <= {"mlserver", "kserve", "numpy", "onnxruntime"}, (path.name, top)
