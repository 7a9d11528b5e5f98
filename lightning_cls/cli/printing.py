"""Small reporting helpers shared by the entry points (no Hydra imports here)."""

from __future__ import annotations

import sys
from collections.abc import Mapping


def to_floats(metrics: Mapping) -> dict[str, float]:
    """Tensor/number metrics -> plain floats (for JSON and logs)."""
    torch = sys.modules.get("torch")  # a tensor here means torch is loaded; never load it for this
    if torch is None:
        return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
    return {
        k: float(v.item() if isinstance(v, torch.Tensor) else v)
        for k, v in metrics.items()
        if isinstance(v, (int, float, torch.Tensor))
        and (not isinstance(v, torch.Tensor) or v.numel() == 1)
    }


def print_config(cfg: Mapping, title: str = "config") -> None:
    """Print a resolved config (nested plain containers) as a rich tree, a branch per group."""
    # Imported here: only train prints its config; the other commands do not load rich.
    import yaml
    from rich import print as rich_print
    from rich.syntax import Syntax
    from rich.tree import Tree

    tree = Tree(title, guide_style="dim")
    for key, value in cfg.items():
        branch = tree.add(str(key), style="bold")
        text = (
            yaml.safe_dump(value, sort_keys=False)
            if isinstance(value, (dict, list))
            else str(value)
        )
        branch.add(Syntax(text.rstrip(), "yaml", theme="ansi_dark", background_color="default"))
    rich_print(tree)
