"""The suite's own layout: pytest imports each test file as a top-level module named after its
file (``pythonpath = ["tests"]``, no packages), so two files of one name in different folders
stop the whole collection ("import file mismatch") only when both are collected together.
What tests share lives in ``tests/helpers/`` (the tests' root holds only test files and
``conftest.py``), and a test builds its ``ClassificationModule`` with the one tiny recipe
(``helpers.make_module``), stating only what differs."""

import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent
HELPERS = TESTS / "helpers"
# The constructor's own tests (its arguments, refusals and TTA on hand-made nets) call it.
CALLS_THE_CONSTRUCTOR = {"test_module.py"}


def _python_files() -> list[Path]:
    return [p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts]


def test_every_test_module_has_a_name_of_its_own():
    where = defaultdict(list)
    for path in _python_files():
        if path.name != "conftest.py":
            where[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not clashes, f"rename one of each (e.g. test_<folder>_<name>.py): {clashes}"


def loose_helpers(folder: Path) -> list[str]:
    """Python files at ``folder`` that are neither a test file nor ``conftest.py``."""
    return sorted(
        p.name
        for p in folder.glob("*.py")
        if p.name != "conftest.py" and not p.name.startswith("test_")
    )


def test_the_tests_root_holds_no_loose_helper(tmp_path):
    assert loose_helpers(TESTS) == [], "move shared test code into tests/helpers/"
    (tmp_path / "test_a.py").touch()
    (tmp_path / "conftest.py").touch()
    (tmp_path / "shared_helpers.py").touch()  # the rule catches one
    assert loose_helpers(tmp_path) == ["shared_helpers.py"]


def module_constructions(source: str) -> list[int]:
    """Lines of ``source`` that call ``ClassificationModule(...)`` (not its classmethods)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "ClassificationModule"
    ]


def test_tests_build_the_module_with_the_tiny_recipe():
    inline = {
        f"{path.relative_to(TESTS)}:{line}"
        for path in _python_files()
        if HELPERS not in path.parents and path.name not in CALLS_THE_CONSTRUCTOR
        for line in module_constructions(path.read_text())
    }
    assert not inline, f"build it with helpers.make_module (tests/helpers/tiny.py): {inline}"
    inline_call = "module = ClassificationModule('mlp', {}, classes=['a'])\n"
    assert module_constructions(inline_call) == [1]  # the rule catches one
    assert module_constructions("ClassificationModule.load_from_checkpoint(path)\n") == []
