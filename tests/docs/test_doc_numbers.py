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

A number that fails the rule is withdrawn or given the command that measures it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
HEADING = re.compile(r"^(#{1,6})\s")
FENCE = re.compile(r"^\s*(```|~~~)\s*([\w-]*)")
SHELL_FENCES = {"bash", "sh", "shell", "console"}
COMMAND_SPAN = re.compile(r"`(?:python3?|\.venv/bin/python|make)\s[^`]*`")
CODE_SPAN = re.compile(r"`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
# Digits not glued to a word: "1.5", "0.98×", "30%", "~10 s"; not "resnet18", "bf16", "x86_64".
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")
EXEMPT = re.compile(r"<!--\s*not measured:\s*\S.*-->")
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
            exempt = bool(EXEMPT.search(line)) or (exempt and not line.strip())
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


PAGES = sorted(DOCS.rglob("*.md"))


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
