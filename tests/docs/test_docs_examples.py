"""The docs' marked code blocks run as tests (markers: see ``doc_blocks.py``).

One test per page runs all of the page's ``run`` blocks in order in a fresh folder; one test
per ``skip`` block reports its reason. Pages written for readers to copy from (the landing
page, the tutorial page and the guides) must mark every python/shell block one way or the other.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from doc_blocks import doc_pages, parse_blocks, with_overrides

REPO = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("run_page.py")
# Every python/shell block on these pages carries a run or skip marker.
FULLY_MARKED = ["docs/index.md", "docs/tutorial.md", "docs/guides/"]
DEFAULT_TIMEOUT_S = 120


def _blocks_by_page() -> dict[str, list]:
    pages = {}
    for page in doc_pages(REPO):
        rel = page.relative_to(REPO).as_posix()
        pages[rel] = parse_blocks(page.read_text(encoding="utf-8"), rel)
    return pages


PAGES = _blocks_by_page()
RUN_PAGES = sorted(p for p, blocks in PAGES.items() if any(b.action == "run" for b in blocks))
SKIPPED = [b for blocks in PAGES.values() for b in blocks if b.action == "skip"]


@pytest.mark.slow  # a page runs several entry points, each ~5 s of imports alone
@pytest.mark.parametrize("page", RUN_PAGES)
def test_page_examples_run(page: str, tmp_path: Path, fork_server, fork_env):
    blocks = [b for b in PAGES[page] if b.action == "run"]
    needed = {m for b in blocks for m in b.options.get("requires", "").split(",") if m}
    missing = sorted(m for m in needed if importlib.util.find_spec(m) is None)
    if missing:
        pytest.skip(f"{page} needs {', '.join(missing)} (an optional extra of pyproject.toml)")
    spec = [
        {
            "path": b.path,
            "line": b.line,
            "kind": b.kind,
            "code": with_overrides(b.code, b.options.get("overrides", ""))
            if b.kind == "shell"
            else b.code,
            "expect": b.options.get("expect"),
            "timeout": int(b.options.get("timeout", DEFAULT_TIMEOUT_S)),
        }
        for b in blocks
    ]
    (tmp_path / "blocks.json").write_text(json.dumps(spec))
    work = tmp_path / "work"
    work.mkdir()
    # Pages say "from a checkout"; the examples are there, the outputs stay in tmp_path.
    (work / "examples").symlink_to(REPO / "examples")
    # `python` is this interpreter (as in an activated venv); a block's `python -m
    # lightning_cls.*` runs in the pre-imported fork server unless the block says fresh="true".
    env = {**fork_env, "PATH": fork_server.path(fork_env["PATH"])}
    for s, b in zip(spec, blocks):
        if b.options.get("fresh") == "true":
            s["PATH"] = fork_server.path(fork_env["PATH"], shim=False)
    asked = len(fork_server.requests())
    runner = [str(RUNNER), str(tmp_path / "blocks.json")]
    timeout = sum(s["timeout"] for s in spec) + 60
    proc = fork_server.run(runner, work, env, timeout, merge_stderr=True)
    output = proc.stdout
    (tmp_path / "page.log").write_text(output)
    assert proc.returncode == 0, f"a code block of {page} failed:\n{output[-6000:]}"
    # A command that fell back to a fresh interpreter pays its imports again: say why.
    fresh = [r for r in fork_server.requests()[asked:] if r.startswith("fresh")]
    fresh = [r for r in fresh if "edited since the server started" not in r]  # right to go fresh
    assert not fresh, f'{page}: commands not run in the fork server (fresh="true"?): {fresh}'


@pytest.mark.parametrize("block", SKIPPED, ids=[b.where for b in SKIPPED])
def test_skipped_example(block):
    pytest.skip(f"{block.where}: {block.options['reason']}")


def test_reader_pages_mark_every_block():
    unmarked = [
        b.where
        for page, blocks in PAGES.items()
        if any(page == p or (p.endswith("/") and page.startswith(p)) for p in FULLY_MARKED)
        for b in blocks
        if b.action is None
    ]
    assert not unmarked, (
        'mark these blocks <!-- test: run --> or <!-- test: skip reason="..." -->: '
        + ", ".join(unmarked)
    )
