"""No machine's absolute paths in what users read: a home folder, a temp folder or a checkout
(``/home/...``, ``/root/...``, ``/tmp/...``, ``/work/...``, ``/Users/...``) in docs/, examples/,
README.md, or a benchmark's docstring and ``--help`` (``add_argument``'s ``help`` and string
``default``). A command that produced a number names its folders as placeholders (``$CIFAR10``,
``$WORK``) or relative paths, and a benchmark's scratch default is the system's temp folder
(``tempfile.gettempdir()``), never a literal one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# An absolute path's first folder, not part of a longer name or a URL (github.com/home/...).
MACHINE_PATH = re.compile(r"(?<![\w.$}/~-])/(?:home|root|tmp|work|Users)(?:/|\b(?!-))")
TEXT = {".md", ".py", ".yaml", ".yml", ".txt", ".sh", ".toml", ".json", ".cfg", ""}


def found(name: str, text: str) -> list[str]:
    return [
        f"{name}:{n}: {line.strip()}"
        for n, line in enumerate(text.splitlines(), 1)
        if MACHINE_PATH.search(line)
    ]


def user_facing_text(path: Path) -> str:
    """A benchmark's module docstring and its arguments' ``help``/``default`` strings."""
    tree = ast.parse(path.read_text())
    parts = [ast.get_docstring(tree) or ""]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            for keyword in node.keywords:
                if keyword.arg in ("help", "default") and isinstance(keyword.value, ast.Constant):
                    parts.append(str(keyword.value.value))
    return "\n".join(parts)


def test_docs_examples_and_readme_name_no_machine_path():
    files = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    files += [p for p in sorted((REPO / "examples").rglob("*")) if p.is_file()]
    hits = []
    for path in files:
        if path.suffix in TEXT and "__pycache__" not in path.parts:
            hits += found(str(path.relative_to(REPO)), path.read_text(errors="replace"))
    assert not hits, "use $CIFAR10/$WORK placeholders or relative paths:\n" + "\n".join(hits)


def test_benchmark_docstrings_and_help_name_no_machine_path():
    hits = []
    for path in sorted((REPO / "benchmarks").glob("*.py")):
        hits += found(str(path.relative_to(REPO)), user_facing_text(path))
    assert not hits, "use placeholders, relative paths or tempfile.gettempdir():\n" + "\n".join(
        hits
    )


def test_the_rule_flags_machine_paths_and_not_names_or_urls():
    flagged = ["--root /root/cifar10/train", "--work /tmp/ood", "cd /home/ana/x", "`/tmp`",
               "/work/main/.venv", "(/Users/bo/data)"]  # fmt: skip
    kept = ["https://github.com/home/x", "tests/work/a", "$WORK/ood", "~/cifar10",
            "--model-store=/mnt/models", "/tmpfs", "/rooted", "/work-dir x"]  # fmt: skip
    assert [line for line in flagged if not MACHINE_PATH.search(line)] == []
    assert [line for line in kept if MACHINE_PATH.search(line)] == []
    source = '"""Run it:\n    python b.py --work /tmp/x\n"""\nimport argparse\n'
    source += 'p.add_argument("--root", default="/root/c", help="data")\n'
    source += 'p.add_argument("--n", default=3, help="how many")\n'
    assert MACHINE_PATH.findall(user_facing_text_of(source)) == ["/tmp/", "/root/"]


def user_facing_text_of(source: str) -> str:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "b.py"
        path.write_text(source)
        return user_facing_text(path)
