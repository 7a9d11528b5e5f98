"""The docs collector itself: markers, overrides, and a failing block failing the page."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import parse_blocks, with_overrides

RUNNER = Path(__file__).with_name("run_page.py")

PAGE = """# Page

<!-- test: run expect="hello" -->
```python
print("hello")
```

<!-- test: skip reason="needs network: downloads CIFAR-10" -->
```bash
python -m lightning_cls.train data=cifar10
```

```python
not marked
```

```text
not code
```
"""


def test_parse_blocks_reads_markers_and_lines():
    blocks = parse_blocks(PAGE, "docs/page.md")
    assert [(b.line, b.kind, b.action) for b in blocks] == [
        (5, "python", "run"),
        (10, "shell", "skip"),
        (14, "python", None),
    ]
    assert blocks[0].options == {"expect": "hello"}
    assert blocks[1].options["reason"] == "needs network: downloads CIFAR-10"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<!-- test: skip -->\n```bash\nls\n```\n", r"page.md:1: a skip marker needs reason="),
        ("<!-- test: runn -->\n```bash\nls\n```\n", r"must start with 'run' or 'skip'"),
        (
            '<!-- test: run overides="x=1" -->\n```bash\nls\n```\n',
            r"unknown test marker option.*overides",
        ),
        (
            "<!-- test: run -->\n\nSome prose.\n```bash\nls\n```\n",
            r"page.md:1: .*not directly followed",
        ),
        ("<!-- test: run -->\n```text\nls\n```\n", r"not directly followed by a python or shell"),
        (
            '<!-- test: run timeout="soon" -->\n```bash\nls\n```\n',
            r"timeout='soon' must be whole seconds",
        ),
        ("```python\nx = 1\n", r"never closed"),
        ('<!-- test: run fresh="yes" -->\n```bash\nls\n```\n', r"fresh='yes' can only be \"true\""),
    ],
)
def test_bad_markers_are_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_blocks(text, "page.md")


def test_indented_block_in_an_admonition():
    text = "!!! note\n    <!-- test: run -->\n    ```python\n    x = 1\n    ```\n"
    (block,) = parse_blocks(text, "p.md")
    assert (block.action, block.code, block.line) == ("run", "x = 1\n", 4)


def test_overrides_go_before_comments_and_keep_set_keys():
    script = (
        "python -m lightning_cls.train model=mlp   # a comment\n"
        "python -m lightning_cls.eval ckpt_path=x\n"
        "python -m lightning_cls.train \\\n    trainer.max_epochs=3 '+x=\"a # b\"'\n"
    )
    out = with_overrides(script, "trainer.max_epochs=1 trainer.limit_train_batches=2")
    assert out.splitlines() == [
        "python -m lightning_cls.train model=mlp trainer.max_epochs=1 trainer.limit_train_batches=2  # a comment",
        "python -m lightning_cls.eval ckpt_path=x",
        "python -m lightning_cls.train \\",
        "    trainer.max_epochs=3 '+x=\"a # b\"' trainer.limit_train_batches=2",
    ]


def test_a_forced_override_replaces_the_commands_own_value():
    script = "python -m lightning_cls.train \\\n    trainer.max_epochs=10 export=onnx\n"
    out = with_overrides(script, "!trainer.max_epochs=2 !+trainer.limit_val_batches=1 x=1")
    assert out.splitlines() == [
        "python -m lightning_cls.train \\",
        "    trainer.max_epochs=2 export=onnx +trainer.limit_val_batches=1 x=1",
    ]


def _run(tmp_path: Path, blocks: list[dict]) -> subprocess.CompletedProcess:
    spec = [{"path": "p.md", "kind": "python", "expect": None, "timeout": 30, **b} for b in blocks]
    (tmp_path / "blocks.json").write_text(json.dumps(spec))
    return subprocess.run(
        [sys.executable, str(RUNNER), str(tmp_path / "blocks.json")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_runner_shares_python_namespace_and_runs_shell(tmp_path):
    proc = _run(
        tmp_path,
        [
            {"line": 3, "code": "x = 20\n"},
            {"line": 9, "code": "open('n.txt', 'w').write(str(x + 1))\n"},
            {"line": 15, "kind": "shell", "code": "cat n.txt\n", "expect": "^21$"},
        ],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("block", "shown"),
    [
        ({"line": 7, "code": "y = 1\nraise KeyError('renamed')\n"}, 'File "p.md", line 8'),
        ({"line": 7, "kind": "shell", "code": "true\nfalse\necho unreachable\n"}, "exit status 1"),
        ({"line": 7, "code": "print('bye')\n", "expect": "hello"}, "does not match expect='hello'"),
    ],
)
def test_runner_fails_on_a_failing_block_and_names_it(tmp_path, block, shown):
    proc = _run(tmp_path, [block, {"line": 20, "code": "open('after', 'w')\n"}])
    assert proc.returncode == 1
    assert "FAILED: block at p.md:7" in proc.stdout
    assert shown in proc.stdout + proc.stderr
    assert "unreachable\n" not in proc.stdout.split("----- output")[-1]
    assert not (tmp_path / "after").exists()  # later blocks do not run
