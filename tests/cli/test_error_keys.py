"""Errors name the key the user set, never an internal one (issue 56, item 4).

``data.num_classes=5`` on three class folders used to end in ``model_kwargs.num_classes=5 ...
set model.num_classes=3``: the interpolated model option and the module's argument, neither of
which the user typed. Now the data's check runs before the model is built, and a scan of every
``raise`` message in lightning_cls/ finds no internal name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
from PIL import Image

import lightning_cls

# Names a user never types: the module's constructor arguments and attributes, the composed
# config's variable. ``_target_`` is left out on purpose: the optuna pruner's spec is YAML the
# user writes with a ``_target_`` key (callbacks/optuna_pruning.py names it as written).
INTERNAL = re.compile(r"\b(model_kwargs|net_kwargs|hparams|cfg\.|self\.)")


def raise_messages(root: Path) -> list[tuple[str, int, str]]:
    """(file, line, text) of the string parts of every ``raise X(...)`` under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                parts = [
                    n.value
                    for n in ast.walk(node.exc)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                ]
                found.append((str(path.relative_to(root.parent)), node.lineno, "".join(parts)))
    return found


def test_no_error_message_names_an_internal_key():
    messages = raise_messages(Path(lightning_cls.__file__).parent)
    assert len(messages) > 200  # the scan sees the package's errors
    named = [f"{f}:{line}: {text[:120]}" for f, line, text in messages if INTERNAL.search(text)]
    assert named == []


def test_the_scan_finds_an_internal_name(tmp_path):
    """The negative control: the message this issue quoted is found."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "m.py").write_text(
        'def f(n, k):\n    raise ValueError(f"model_kwargs.num_classes={n} but {k} classes")\n'
    )
    [(_, line, text)] = raise_messages(package)
    assert line == 2 and INTERNAL.search(text)


def test_data_num_classes_is_named_with_the_folder_and_its_classes(tmp_path, user_command):
    for name in ("ant", "bee", "cow"):
        folder = tmp_path / "imgs" / "train" / name
        folder.mkdir(parents=True)
        for i in range(2):
            Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(folder / f"{i}.png")
    argv = ["-m", "lightning_cls.train", "data=imagefolder", "data.root=imgs", "data.cache=false"]
    out = user_command([*argv, "data.num_classes=5", f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert out.returncode == 1, out.stderr[-2000:]
    assert out.stderr.splitlines()[-1] == (
        "error: data.num_classes=5 but imgs/train has 3 class folders: ant, bee, cow; "
        "set data.num_classes=3 or leave it unset."
    )
