"""``--help`` shares one config repository copy (cli/hydra_help.py) and prints Hydra's own text."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hydra import initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.global_hydra import GlobalHydra
from hydra.core.object_type import ObjectType

from lightning_cls import config_dir
from lightning_cls.cli.hydra_help import share_group_repository

# Runs a command's --help in a fresh interpreter; "hydra" first: with Hydra's own get_group_options.
HELP = (
    "import runpy, sys\n"
    "import lightning_cls.cli.hydra_help as h\n"
    "if sys.argv[1] == 'hydra':\n"
    "    h.share_group_repository = lambda: None\n"
    "module, sys.argv = sys.argv[2], [sys.argv[2], *sys.argv[3:]]\n"
    "runpy.run_module(f'lightning_cls.{module}', run_name='__main__')\n"
)


def _help(which: str, command: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", HELP, which, command, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("train", "--help"),
        ("train", "--help", "model=mlp", "trainer.max_epochs=2"),
        ("predict", "-h"),
    ],
)
def test_help_is_hydras_own_text(args):
    ours = _help("shared", *args)
    assert ours == _help("hydra", *args)
    assert "== Configuration groups ==" in ours and "== Config ==" in ours
    if args[0] == "train":
        assert "model: " in ours and "trainer: " in ours  # the groups, with their options


def _groups(loader: ConfigLoaderImpl, parent: str = "") -> list[tuple[str, list[str]]]:
    """Every group under ``parent`` with its config options, as Hydra's help walks them."""
    found = []
    for name in loader.get_group_options(parent, ObjectType.GROUP):
        group = f"{parent}/{name}" if parent else name
        found += [(group, loader.get_group_options(group)), *_groups(loader, group)]
    return found


def test_calls_without_overrides_share_one_copy(monkeypatch):
    copies = []
    hydra_copy = ConfigLoaderImpl._parse_overrides_and_create_caching_repo

    def counted(self, config_name, overrides):
        copies.append((config_name, overrides))
        return hydra_copy(self, config_name, overrides)

    monkeypatch.setattr(ConfigLoaderImpl, "_parse_overrides_and_create_caching_repo", counted)
    monkeypatch.setattr(ConfigLoaderImpl, "get_group_options", ConfigLoaderImpl.get_group_options)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir(), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        expected = _groups(loader)
        assert len(copies) == len(expected) * 2 + 1 > 20  # Hydra: one copy per call
        share_group_repository()
        share_group_repository()  # installed once
        copies.clear()
        assert _groups(loader) == expected and len(copies) == 1
        assert "mlp" in dict(expected)["model"]
        # a call with overrides still makes its own copy, as Hydra does
        loader.get_group_options("model", overrides=["model=mlp"])
        assert copies[-1] == (None, ["model=mlp"]) and len(copies) == 2
