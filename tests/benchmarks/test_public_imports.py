"""benchmarks/*.py reach the library only through public names: no ``sys.path`` manipulation
(a script's own folder is already first on ``sys.path``, so siblings import as top-level
modules), no underscore name of ``lightning_cls`` (imported, or read off an imported module),
and no underscore name of a sibling benchmark either."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SIBLINGS = {p.stem for p in BENCHMARKS.glob("*.py")}


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def watched(module: str) -> bool:
    """Whether ``module`` is the library or a sibling benchmark (whose privates are off limits)."""
    return module.split(".")[0] in {"lightning_cls", *SIBLINGS}


def violations(source: str) -> list[str]:
    """Each ``sys.path`` use and each private name taken from the library or a sibling."""
    tree = ast.parse(source)
    found, modules = [], set()  # names bound to an imported library or sibling module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if watched(alias.name):
                    modules.add(alias.asname or alias.name.split(".")[0])
                    if any(private(part) for part in alias.name.split(".")):
                        found.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and watched(node.module):
            for alias in node.names:
                if private(alias.name) or any(private(p) for p in node.module.split(".")):
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name}")
                else:
                    modules.add(alias.asname or alias.name)  # a submodule, or a public name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr == "path" and isinstance(node.value, ast.Name) and node.value.id == "sys":
                found.append(f"line {node.lineno}: sys.path")
            elif private(node.attr):
                base = node.value
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in modules:
                    found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "sys.path" in node.value and node not in docstrings(tree):
                found.append(f"line {node.lineno}: sys.path in code run as a string")
    return found


def docstrings(tree: ast.Module) -> set[ast.AST]:
    nodes = (tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)))
    return {
        n.body[0].value
        for n in nodes
        if n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
    }


@pytest.mark.parametrize("script", sorted(p.name for p in BENCHMARKS.glob("*.py")))
def test_benchmark_uses_public_names_only(script):
    assert violations((BENCHMARKS / script).read_text()) == []


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import sys\nsys.path.insert(0, 'x')\n", "line 2: sys.path"),
        ("import sys\nsys.path = ['x']\n", "line 2: sys.path"),
        ("code = 'import sys; sys.path.append(1)'\n", "line 1: sys.path in code run as a string"),
        ("from lightning_cls.inference.network import _last_linear\n", "import _last_linear"),
        ("from lightning_cls.export import _private as p\n", "import _private"),
        ("import lightning_cls._version\n", "import lightning_cls._version"),
        ("from lightning_cls.export import writer\nwriter._temp_files\n", "writer._temp_files"),
        ("import lightning_cls.export.writer as w\nw._temp_files([])\n", "w._temp_files"),
        ("from trust import _cpu\n", "from trust import _cpu"),
        ("import serve_load\nserve_load._load()\n", "serve_load._load"),
    ],
)
def test_scan_finds_each_kind_of_violation(source, expected):
    found = violations(source)
    assert len(found) == 1 and expected in found[0], found


def test_scan_allows_public_names_dunders_and_private_names_of_other_packages():
    source = (
        '"""Docstrings may say sys.path."""\n'
        "import torch\n"
        "from lightning_cls.export import export_format\n"
        "from paired import cpu_name\n"
        "torch._C\n"  # not the library's
        "export_format.__doc__\n"
        "self_obj = object(); self_obj._x = 1\n"
    )
    assert violations(source) == []
