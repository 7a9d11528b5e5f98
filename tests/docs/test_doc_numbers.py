"""Every number in a Markdown table row of docs/ comes with the command that produces it.

The rule, for whoever edits a page (docs/serving.md included):

- A *number* is a figure in a table row's text (``352``, ``0.98×``, ``20–30%``, ``~10 s``):
  digits that are not part of a word (``resnet18``, ``bf16``, ``.pt2`` and ``sm80`` are names)
  and not inside an inline code span (```max_queue=32``` is a setting or a command, and says
  itself where it comes from). The header row and the ``|---|`` row are not checked.
- A table with a number needs a *command* in its section: a fenced block marked ``bash``
  (``sh``, ``shell``, ``console``), or an inline code span that starts with ``python``,
  ``python3``, ``.venv/bin/python`` or ``make``. Its section runs from the heading above the
  table to the next heading of the same or a higher level (its subsections included).
- A table whose numbers are not measurements (setting defaults, limits, error codes) says so on
  the line above it: ``<!-- not measured: <why> -->``. A page says why, never the checker.
- A table whose command is cheap and deterministic (seconds, the same figures on every
  machine) names it on the line above: ``<!-- numbers: <shell command> -->``. The suite runs
  that command (``bash -c``, from the repository root, ``python`` being the suite's
  interpreter, at most ``SOURCE_TIMEOUT_S``) and every number of the table's body must appear
  among the numbers of its output, as written (``0.98`` is not ``0.980``).

So this test checks two things. Tables with a ``numbers:`` marker: their figures come from the
committed command's output, now. Every other table with numbers: only that a command stands in
its section (or a ``not measured`` reason above it); whether those figures are what the command
printed is not checked here (they are timings or runs of minutes to hours, on a named machine).

A number that fails the rule is withdrawn or given the command that measures it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SOURCE_TIMEOUT_S = 60
HEADING = re.compile(r"^(#{1,6})\s")
FENCE = re.compile(r"^\s*(```|~~~)\s*([\w-]*)")
SHELL_FENCES = {"bash", "sh", "shell", "console"}
COMMAND_SPAN = re.compile(r"`(?:python3?|\.venv/bin/python|make)\s[^`]*`")
CODE_SPAN = re.compile(r"`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
# Digits not glued to a word: "1.5", "0.98×", "30%", "~10 s"; not "resnet18", "bf16", "x86_64".
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")
EXEMPT = re.compile(r"<!--\s*not measured:\s*\S.*-->")
SOURCE = re.compile(r"<!--\s*numbers:\s*(\S.*?)\s*-->")
RULE = re.compile(r"^\s*\|?\s*:?-{3,}")


def numbers_in(row: str) -> list[str]:
    """The figures a table row states (code spans and link targets left out)."""
    text = LINK_TARGET.sub("]", CODE_SPAN.sub(" ", row))
    return NUMBER.findall(text)


def _sections(lines: list[str]) -> list[tuple[int, int]]:
    """(start, end) line ranges: from each heading to the next of the same or higher level."""
    heads, fenced = [], False
    for i, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            heads.append((i, len(m.group(1))))
    bounds = [(0, heads[0][0] if heads else len(lines))]  # the text before the first heading
    for k, (start, level) in enumerate(heads):
        end = next((i for i, lv in heads[k + 1 :] if lv <= level), len(lines))
        bounds.append((start, end))
    return bounds


def _has_command(lines: list[str]) -> bool:
    fenced = False
    for line in lines:
        fence = FENCE.match(line)
        if fence:
            if not fenced and fence.group(2).lower() in SHELL_FENCES:
                return True
            fenced = not fenced
        elif not fenced and COMMAND_SPAN.search(line):
            return True
    return False


def unbacked_numbers(text: str) -> list[str]:
    """``"line N: <row>"`` for each table row with a number and no command in its section."""
    lines = text.splitlines()
    sections = _sections(lines)
    found, fenced, exempt, header_next = [], False, False, True
    for i, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
            continue
        is_row = not fenced and line.lstrip().startswith("|")
        if not is_row:
            marked = EXEMPT.search(line) or SOURCE.search(line)  # a source is run, below
            exempt = bool(marked) or (exempt and not line.strip())
            header_next = True
            continue
        if header_next or RULE.match(line):  # a table's first row is its header
            header_next = False
            continue
        if exempt or not numbers_in(line):
            continue
        start, end = max((s for s in sections if s[0] <= i < s[1]), key=lambda s: s[0])
        if not _has_command(lines[start:end]):
            found.append(f"line {i + 1}: {line.strip()[:120]}")
    return found


def sourced_tables(text: str) -> list[tuple[int, str, list[str]]]:
    """``(line, command, numbers)`` for each table below a ``<!-- numbers: ... -->`` marker:
    the marker's line, its command, and the figures of the table's body rows."""
    found, command, rows, fenced = [], None, 0, False
    for i, line in enumerate(text.splitlines()):
        if FENCE.match(line):
            fenced, command = not fenced, None
        elif fenced:
            continue
        elif m := SOURCE.search(line):
            command, rows = m.group(1), 0
            found.append((i + 1, command, []))
        elif command is not None and line.lstrip().startswith("|"):
            rows += 1  # the first row is the header
            if rows > 1 and not RULE.match(line):
                found[-1][2].extend(numbers_in(line))
        elif line.strip() or rows:  # other text, or the blank line after the table
            command = None
    return found


def missing_figures(numbers: list[str], output: str) -> list[str]:
    """The table's figures that its command's output does not state."""
    printed = set(NUMBER.findall(output))
    return [n for n in numbers if n not in printed]


PAGES = sorted(DOCS.rglob("*.md"))
SOURCED = [
    (page, *table) for page in PAGES for table in sourced_tables(page.read_text(encoding="utf-8"))
]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_every_number_in_a_table_has_its_command(page):
    unbacked = unbacked_numbers(page.read_text(encoding="utf-8"))
    assert not unbacked, (
        f"{page.relative_to(DOCS.parent)}: table numbers without a command in their section "
        "(attach the command that measures them, or withdraw them; see this test's docstring):\n"
        + "\n".join(unbacked)
    )


def test_the_checker_flags_a_number_without_a_command_and_accepts_one_with():
    bare = "# Speed\n\n| model | img/s |\n|---|---|\n| resnet18 | 352 |\n"
    assert unbacked_numbers(bare) == ["line 5: | resnet18 | 352 |"]
    with_command = bare + "\n```bash\npython benchmarks/ort_options.py\n```\n"
    assert unbacked_numbers(with_command) == []
    inline = bare + "\nMeasured with `python benchmarks/ort_options.py --rounds 5`.\n"
    assert unbacked_numbers(inline) == []
    # A command in another section, or in the parent's text only, does not count; one in a
    # subsection of the table's section does.
    elsewhere = bare + "\n# Other\n\n```bash\nmake test\n```\n"
    assert unbacked_numbers(elsewhere) == ["line 5: | resnet18 | 352 |"]
    parent = "# Speed\n\n```bash\nmake bench\n```\n\n## Detail\n\n| a | b |\n|---|---|\n| x | 3 |\n"
    assert unbacked_numbers(parent) == ["line 11: | x | 3 |"]
    assert unbacked_numbers(bare + "\n## How\n\n`make bench`\n") == []
    # Names and code spans are not numbers; an explained exemption is honoured.
    names = "# M\n\n| a | b |\n|---|---|\n| resnet18, bf16, .pt2 | `max_queue=32` |\n"
    assert unbacked_numbers(names) == []
    settings = "# S\n\n<!-- not measured: setting defaults -->\n| key | default |\n|---|---|\n| max | 64 |\n"
    assert unbacked_numbers(settings) == []
    assert numbers_in("| ~10 s | 0.98× | 20–30% | 1,024 |") == ["10", "0.98", "20", "30", "1,024"]


@pytest.mark.parametrize(
    ("page", "line", "command", "numbers"),
    SOURCED,
    ids=[f"{p.relative_to(DOCS)}:{line}" for p, line, _, _ in SOURCED],
)
def test_a_sourced_table_states_what_its_command_prints(page, line, command, numbers):
    assert numbers, f"{page.relative_to(REPO)}:{line}: a numbers: marker above no figures"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=SOURCE_TIMEOUT_S)  # fmt: skip
    assert proc.returncode == 0, f"{command!r} failed:\n{proc.stderr[-2000:]}"
    missing = missing_figures(numbers, proc.stdout)
    assert not missing, (
        f"{page.relative_to(REPO)}:{line}: the table states {missing}, which {command!r} does "
        f"not print (it printed: {proc.stdout[-500:]!r}); rerun it and copy its figures."
    )


def test_the_sourced_table_checker_reads_the_table_under_its_marker():
    page = (
        "# T\n\n<!-- numbers: python -c 'print(2, 9, 31)' -->\n| a | b |\n|---|---|\n"
        "| `x=5` | 2 of 31, 9 |\n\nAfter: 7.\n\n| c |\n|---|\n| 8 |\n"
    )
    assert sourced_tables(page) == [(3, "python -c 'print(2, 9, 31)'", ["2", "31", "9"])]
    assert unbacked_numbers(page) == ["line 12: | 8 |"]  # the next table has no command
    assert missing_figures(["2", "31", "9"], "(2, 9, 31, None)\n") == []
    assert missing_figures(["2", "0.98", "9"], "(2, 0.980, 9)") == ["0.98"]  # as written
