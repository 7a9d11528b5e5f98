"""Run the marked code blocks of one docs page, in order, in the current folder.

Usage: ``python run_page.py blocks.json`` (written by ``test_docs_examples.py``). Python blocks
share one namespace, like notebook cells, and are compiled under the page's own file name and
line numbers, so a traceback points at the Markdown line. Shell blocks run with
``bash -euo pipefail`` (with the block's own ``PATH`` where the spec gives one). Exits 1 at
the first block that fails, naming it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import subprocess
import sys
import time
import traceback


class _Tee(io.TextIOBase):
    """Write to the real stream and keep a copy (for the block's ``expect`` check)."""

    def __init__(self, stream):
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def run_python(block: dict, namespace: dict) -> tuple[bool, str]:
    # Blank lines in front keep the Markdown file's line numbers in tracebacks.
    code = compile("\n" * (block["line"] - 1) + block["code"], block["path"], "exec")
    out, err = _Tee(sys.stdout), _Tee(sys.stderr)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            exec(code, namespace)
    except BaseException:  # noqa: BLE001 - report any failure of the reader's code, then stop
        traceback.print_exc()
        return False, out.copy.getvalue() + err.copy.getvalue()
    return True, out.copy.getvalue() + err.copy.getvalue()


def run_shell(block: dict) -> tuple[bool, str]:
    try:
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block["code"]],
            env={**os.environ, "PATH": block["PATH"]} if "PATH" in block else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=block["timeout"],
        )
    except subprocess.TimeoutExpired as err:
        print(err.output or "")
        print(f"timed out after {block['timeout']} s")
        return False, ""
    print(proc.stdout)
    if proc.returncode != 0:
        print(f"exit status {proc.returncode}")
    return proc.returncode == 0, proc.stdout


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (user + system)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        blocks = json.load(f)
    namespace = {"__name__": "__main__"}
    for block in blocks:
        print(f"===== {block['path']}:{block['line']} ({block['kind']})", flush=True)
        print(block["code"], flush=True)
        print("----- output", flush=True)
        started, cpu = time.perf_counter(), _cpu_seconds()
        if block["kind"] == "python":
            ok, output = run_python(block, namespace)
        else:
            ok, output = run_shell(block)
        if ok and block.get("expect") and not re.search(block["expect"], output):
            print(f"output does not match expect={block['expect']!r}")
            ok = False
        wall = time.perf_counter() - started
        print(f"----- {wall:.1f} s wall, {_cpu_seconds() - cpu:.1f} s CPU", flush=True)
        if not ok:
            print(f"FAILED: block at {block['path']}:{block['line']}", flush=True)
            return 1
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
