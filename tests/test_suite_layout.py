"""The suite's own layout: pytest imports each test file as a top-level module named after its
file (``pythonpath = ["tests"]``, no packages), so two files of one name in different folders
stop the whole collection ("import file mismatch") only when both are collected together."""

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_every_test_module_has_a_name_of_its_own():
    where = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if path.name != "conftest.py" and "__pycache__" not in path.parts:
            where[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not clashes, f"rename one of each (e.g. test_<folder>_<name>.py): {clashes}"
