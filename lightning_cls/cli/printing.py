"""Small reporting helpers shared by the entry points (no Hydra imports here)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

LOG_WIDTH = 10_000  # columns of the config tree printed into a log (no terminal to fit)


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
    from rich.console import Console
    from rich.syntax import Syntax
    from rich.tree import Tree

    tree = Tree(title, guide_style="dim")
    for key, value in cfg.items():
        branch = tree.add(str(key), style="bold")
        text = (
            yaml.safe_dump(value, sort_keys=False, width=LOG_WIDTH)
            if isinstance(value, (dict, list))
            else str(value)
        )
        branch.add(Syntax(text.rstrip(), "yaml", theme="ansi_dark", background_color="default"))
    # Into a file or pipe (a job's log), whole lines: rich would crop them at 80 columns.
    Console(width=None if sys.stdout.isatty() else LOG_WIDTH).print(tree)


def print_run(cfg: Mapping, verbose: bool = False) -> None:
    """What a training run is about to do: ``run_summary``'s lines, or with ``verbose`` the
    whole resolved config as a tree (always saved in the run folder's ``.hydra/config.yaml``)."""
    if verbose:
        print_config(cfg)
    else:
        sys.stdout.write("\n".join(run_summary(cfg)) + "\n")
        sys.stdout.flush()


def run_summary(cfg: Mapping) -> list[str]:
    """A few lines naming the data, model, task, optimizer, trainer and run folder of ``cfg``
    (a resolved training config as nested plain containers)."""
    data, model, task = cfg.get("data") or {}, cfg.get("model") or {}, cfg.get("task") or {}
    trainer, optimizer = cfg.get("trainer") or {}, cfg.get("optimizer") or {}
    scheduler = cfg.get("scheduler") or {}
    run = _shown_path(((cfg.get("paths") or {}).get("output_dir")) or ".")
    source = data.get("root") or data.get("data_dir") or ""
    lines = [
        f"data       {data.get('name')}: {data.get('num_classes')} classes, batch "
        f"{data.get('batch_size')}, {data.get('image_size')} px"
        + (f", {source}" if source else ""),
        f"model      {model.get('name')}"
        + (f" ({model['source']})" if model.get("source") else ""),
        f"task       {task.get('name')}, best checkpoint by {cfg.get('optimized_metric')}",
        f"optimizer  {_short(optimizer)} lr={optimizer.get('lr')}, scheduler {_short(scheduler)}",
        "trainer    "
        + ", ".join(
            f"{k}={trainer.get(k)}" for k in ("max_epochs", "accelerator", "devices", "precision")
        ),
        f"run        {run}  (seed {cfg.get('seed')})",
        f"config     {Path(run) / '.hydra' / 'config.yaml'}  (verbose=true prints it here)",
    ]
    if cfg.get("experiment_name"):
        lines.insert(0, f"experiment {cfg['experiment_name']}")
    return lines


def _short(node: Mapping) -> str:
    """``torch.optim.Adam`` -> ``adam``; nothing -> ``none``."""
    target = node.get("_target_") if isinstance(node, Mapping) else None
    return str(target).rsplit(".", 1)[-1].lower() if target else "none"


def _shown_path(path: str) -> str:
    """``path`` relative to the working folder when it lies below it."""
    try:
        return os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd()) else path
    except ValueError:
        return path
