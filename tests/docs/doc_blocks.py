"""Find the code blocks of the Markdown docs that are marked for testing.

A fenced ``python`` or shell (``bash``/``sh``/``shell``) block is tested when the last
non-blank line before its opening fence is a marker comment (invisible on the site):

    <!-- test: run -->
    <!-- test: run overrides="trainer.max_epochs=1" expect="test/acc" timeout=120 -->
    <!-- test: skip reason="needs network: downloads CIFAR-10" -->

``run`` blocks of one page are executed in order, in one temporary folder, by
``run_page.py``: Python blocks share one namespace (like cells of a notebook), shell blocks
run with ``bash -euo pipefail``. ``overrides`` are appended to every
``-m lightning_cls.train`` command of the block (``python -m`` or ``torchrun ... -m``; keys
the command already sets are left alone unless the override starts with ``!``, which replaces
the command's value: ``overrides="!trainer.max_epochs=2"``), so a page can show the real
command while the test trains for one short epoch. ``expect`` is a regular expression that the block's output must
contain. ``requires="optuna,litserve"`` names modules of optional extras: without them the
whole page is skipped, saying which are missing. A shell block's ``python -m lightning_cls.*``
commands run in a pre-imported interpreter that forks per command (``fork_server.py``: same
folder, environment, files and exit codes, no import time); ``fresh="true"`` gives each
command a new interpreter instead (a block that checks what a command imports). ``skip``
blocks become skipped tests that show their reason.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

LANGUAGES = {"python": "python", "py": "python", "bash": "shell", "sh": "shell", "shell": "shell"}
RUN_KEYS = {"overrides", "expect", "timeout", "requires", "fresh"}
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*test:\s*(?P<body>.*?)\s*-->\s*$")
_TRAIN = re.compile(r"\s-m\s+lightning_cls\.train\b")  # python -m, torchrun ... -m


@dataclass
class Block:
    """One fenced code block: where it is, its kind, its code and its marker (if any)."""

    path: str  # as given, e.g. docs/tutorial.md
    line: int  # 1-based line of the first code line
    kind: str  # "python" or "shell"
    code: str
    action: str | None = None  # "run", "skip" or None (not marked)
    options: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def parse_marker(body: str, where: str) -> tuple[str, dict[str, str]]:
    """``run key="value" ...`` -> ("run", {key: value}); bad markers raise ValueError."""
    try:
        words = shlex.split(body)
    except ValueError as err:
        raise ValueError(f"{where}: unreadable test marker '{body}' ({err}).") from None
    if not words or words[0] not in ("run", "skip"):
        raise ValueError(f"{where}: test marker '{body}' must start with 'run' or 'skip'.")
    options = {}
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if not sep:
            raise ValueError(f"{where}: test marker option '{word}' needs the form key=\"value\".")
        options[key] = value
    allowed = RUN_KEYS if words[0] == "run" else {"reason"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(
            f"{where}: unknown test marker option(s) {unknown} for '{words[0]}'; "
            f"allowed: {sorted(allowed)}."
        )
    if words[0] == "skip" and not options.get("reason"):
        raise ValueError(f'{where}: a skip marker needs reason="..." (shown in the test report).')
    if options.get("fresh", "true") != "true":
        raise ValueError(f'{where}: fresh={options["fresh"]!r} can only be "true".')
    if "timeout" in options and not options["timeout"].isdigit():
        raise ValueError(f"{where}: timeout={options['timeout']!r} must be whole seconds.")
    return words[0], options


def parse_blocks(text: str, path: str) -> list[Block]:
    """Every python/shell fenced block of a Markdown text, with its marker.

    A marker that is not directly followed by a python or shell block is an error, so a typo
    cannot silently turn a test off.
    """
    lines = text.splitlines()
    blocks: list[Block] = []
    pending: tuple[int, str] | None = None  # (line number, marker body) awaiting its block
    i = 0
    while i < len(lines):
        marker = _MARKER.match(lines[i])
        fence = _FENCE.match(lines[i])
        if marker:
            _dangling(pending, path)
            pending = (i + 1, marker.group("body"))
        elif fence:
            end = _closing_fence(lines, i, fence.group("fence"))
            indent = len(fence.group("indent"))
            language = (fence.group("info").split() or [""])[0].strip("{}.").lower()
            kind = LANGUAGES.get(language)
            if kind is None:
                _dangling(pending, path)
            else:
                body = "\n".join(line[indent:] for line in lines[i + 1 : end])
                block = Block(path, i + 2, kind, body + "\n")
                if pending is not None:
                    block.action, block.options = parse_marker(pending[1], f"{path}:{pending[0]}")
                blocks.append(block)
            pending = None
            i = end
        elif lines[i].strip():
            _dangling(pending, path)
            pending = None
        i += 1
    _dangling(pending, path)
    return blocks


def _closing_fence(lines: list[str], start: int, fence: str) -> int:
    for j in range(start + 1, len(lines)):
        stripped = lines[j].strip()
        if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
            return j
    raise ValueError(f"code block opened at line {start + 1} is never closed.")


def _dangling(pending: tuple[int, str] | None, path: str) -> None:
    if pending is not None:
        raise ValueError(
            f"{path}:{pending[0]}: test marker '{pending[1]}' is not directly followed by a "
            "python or shell code block."
        )


def with_overrides(script: str, overrides: str) -> str:
    """Append Hydra ``overrides`` to each ``-m lightning_cls.train`` command of a script
    (``python -m`` or a launcher such as ``torchrun ... -m``).

    Backslash-continued lines count as one command; the overrides go before a trailing
    ``# comment``; a key the command already sets (``trainer.max_epochs=3``) keeps its value,
    unless the override is forced (``!trainer.max_epochs=1``: the command's value is replaced).
    """
    if not overrides.strip():
        return script
    out, command = [], []
    for line in script.splitlines():
        command.append(line)
        if line.rstrip().endswith("\\"):
            continue
        logical = "\n".join(command)
        command = []
        if _TRAIN.search(logical):
            code, comment = _split_comment(logical)
            for forced in (o[1:] for o in overrides.split() if o.startswith("!")):
                code, replaced = _replace_key(code, forced)
                code += "" if replaced else f" {forced}"
            extra = [
                o for o in overrides.split() if not o.startswith("!") and not _sets_key(code, o)
            ]
            logical = " ".join([code.rstrip(), *extra]) + (f"  {comment}" if comment else "")
        out.append(logical)
    out.extend(command)
    return "\n".join(out) + "\n"


def _split_comment(line: str) -> tuple[str, str]:
    """Split off an unquoted ``#`` comment that follows whitespace (shell semantics)."""
    quote = None
    for k, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k], line[k:]
    return line, ""


def _replace_key(command: str, override: str) -> tuple[str, bool]:
    """``command`` with its own ``key=value`` of ``override``'s key set to ``override``."""
    key = override.split("=", 1)[0].lstrip("+~")
    pattern = rf"(^|[\s'\"])[+~]*{re.escape(key)}=[^\s'\"]*"
    new, count = re.subn(pattern, lambda m: m.group(1) + override, command, count=1)
    return new, count > 0


def _sets_key(command: str, override: str) -> bool:
    key = override.split("=", 1)[0].lstrip("+~")
    return re.search(rf"(^|[\s'\"])[+~]*{re.escape(key)}=", command) is not None


def doc_pages(repo: Path) -> list[Path]:
    """The Markdown pages whose blocks are collected: docs/**/*.md and README.md."""
    return sorted((repo / "docs").rglob("*.md")) + [repo / "README.md"]
