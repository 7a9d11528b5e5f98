"""Each command's ``--help`` (cli/command_help.py, conf/hydra/default.yaml's help template):
titled with the command, naming its required arguments, listing only its own config groups;
docs/index.md's group table agrees with ``train --help``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from lightning_cls import config_dir

DOCS = Path(__file__).parents[2] / "docs" / "index.md"


def _help(command: str, user_command, cwd) -> str:
    out = user_command(["-m", f"lightning_cls.{command}", "--help"], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _groups(text: str) -> dict[str, tuple[set[str], str]]:
    """``{group: (options, chosen)}`` from a help's "Configuration groups" section."""
    section = text.split("== Configuration groups ==")[1].split("== Config ==")[0]
    found = re.findall(r"^(\w+): (.*) \[(\w+)\]$", section, flags=re.M)
    return {group: (set(options.split(", ")), chosen) for group, options, chosen in found}


@pytest.mark.parametrize(
    ("command", "required", "groups"),
    [
        ("serve", ["ckpt_path"], {"paths", "serve"}),
        ("predict", ["ckpt_path", "inputs"], {"paths"}),
        ("export", ["ckpt_path"], {"augment", "data", "export", "paths"}),
        ("explain", ["ckpt_path", "inputs"], {"paths"}),
        # augment: a data config picks its preset (data=cifar10: augment=crop_flip)
        ("eval", ["ckpt_path"], {"augment", "data", "logger", "paths", "trainer"}),
    ],
)
def test_help_is_the_commands_own(command, required, groups, user_command, tmp_path):
    text = _help(command, user_command, tmp_path)
    assert text.splitlines()[0] == (
        f"python -m lightning_cls.{command}: the options of this command (key=value)."
    )
    assert "__main__" not in text and "is powered by Hydra" not in text
    asked = text.split("== Required arguments ==")[1].split("==")[0].split()
    assert asked == [f"{key}=..." for key in required]
    assert set(_groups(text)) == groups  # serve offered model, optimizer, trainer before


def test_docs_group_table_matches_train_help(user_command, tmp_path):
    helped = _groups(_help("train", user_command, tmp_path))
    assert {"model", "data", "trainer", "callbacks"} <= set(helped)
    table = DOCS.read_text().split("| group | options |")[1].split("\n\n")[0]
    documented: dict[str, set[str]] = {}
    for row in table.splitlines()[2:]:
        groups_cell, options_cell = row.strip("|").split("|")[:2]
        groups = re.findall(r"`(\w+)`", groups_cell)
        # "a / b" rows: the options of each group, in the same order
        parts = options_cell.split(" / ") if len(groups) > 1 else [options_cell]
        for group, part in zip(groups, parts, strict=True):
            documented[group] = set(re.findall(r"`(\w+)`", part))
    assert set(documented) == set(helped)
    # Every callback file can be named (callbacks=[default,x]): the table lists the add-ons, the
    # ones default.yaml does not already include.
    default = yaml.safe_load((Path(config_dir()) / "callbacks" / "default.yaml").read_text())
    in_default = {d for d in default["defaults"] if isinstance(d, str)}
    for group, (options, _chosen) in helped.items():
        expected = options - in_default if group == "callbacks" else options
        assert documented[group] <= options, (group, documented[group] - options)
        assert expected <= documented[group], (group, expected - documented[group])
