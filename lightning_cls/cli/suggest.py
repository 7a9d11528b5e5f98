"""What a mistyped command line meant: the closest key, option or override, in one line.

Hydra answers ``trainer.max_epoch=3`` with "To append to your config use +trainer.max_epoch=3"
(which then fails in the Trainer), ``--epochs 3`` with argparse's usage, and ``model=resnet50``
with its search path. ``run_cli`` asks here first:

- ``unknown_key``: an override of a key the config lacks gets the closest key of the composed
  config (``difflib``) or of the constructor its node builds (the Trainer's keyword
  arguments for ``trainer.*``); an unexpected keyword argument of a constructor likewise;
- ``unknown_option``: a group option that does not exist lists the options of the group (and
  names ``model=torchvision``/``model=timm`` for the models of those libraries);
- ``flag_hint``: an argparse-style flag gets its override (``--epochs 3`` ->
  ``trainer.max_epochs=3``).

Part of the entry-point layer: it composes the command's config to know its keys.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Iterable, Mapping

# Hydra's own command-line flags (hydra/_internal/utils.py get_args_parser): not typos.
HYDRA_FLAGS = frozenset(
    "--help -h --hydra-help --version --cfg -c --resolve --package -p --run -r --multirun -m "
    "--shell-completion -sc --config-path -cp --config-name -cn --config-dir -cd "
    "--experimental-rerun --info -i".split()
)
# The flags of other training scripts, and the override that does the same here.
FLAGS = {
    "epochs": "trainer.max_epochs",
    "max-epochs": "trainer.max_epochs",
    "steps": "trainer.max_steps",
    "max-steps": "trainer.max_steps",
    "lr": "optimizer.lr",
    "learning-rate": "optimizer.lr",
    "wd": "optimizer.weight_decay",
    "weight-decay": "optimizer.weight_decay",
    "batch-size": "data.batch_size",
    "bs": "data.batch_size",
    "workers": "data.num_workers",
    "num-workers": "data.num_workers",
    "model": "model",
    "arch": "model",
    "data": "data",
    "dataset": "data",
    "data-dir": "data.root",
    "devices": "trainer.devices",
    "gpus": "trainer.devices",
    "accelerator": "trainer.accelerator",
    "precision": "trainer.precision",
    "seed": "seed",
    "resume": "ckpt_path",
    "checkpoint": "ckpt_path",
    "ckpt": "ckpt_path",
    "experiment": "experiment",
    "output-dir": "hydra.run.dir",
    "verbose": "verbose",
}
TORCHVISION_ROUTE = "model=torchvision model.name={0} or model=timm model.name={0}"


def unknown_flag(args: list[str]) -> int | None:
    """The position of the first argparse-style flag Hydra would refuse, or None."""
    for i, arg in enumerate(args):
        flag = arg.split("=", 1)[0]
        if arg.startswith("-") and flag not in HYDRA_FLAGS and not _is_number(arg):
            return i
    return None


def flag_hint(args: list[str], keys: Iterable[str] | None = None) -> str | None:
    """The error line for the first argparse-style flag Hydra would refuse, or None.

    ``keys``: the command's config keys (with its group names); a flag whose override this
    command does not have gets the generic form (``--a.b=c`` -> ``a.b=c``)."""
    i = unknown_flag(args)
    if i is None:
        return None
    flag, _, value = args[i].partition("=")
    name = flag.lstrip("-")
    if (
        not value
        and i + 1 < len(args)
        and not args[i + 1].startswith("-")
        and "=" not in args[i + 1]
    ):
        value = args[i + 1]
    key = FLAGS.get(name.replace("_", "-"))
    if key is None or (keys is not None and key.split(".")[0] != "hydra" and key not in set(keys)):
        key = name.replace("-", "_")
    value = value or "true"  # a switch: --verbose
    return f"unknown flag {flag}: settings are key=value; did you mean {key}={value}?"


def unknown_key(key: str, config: Mapping | None, targets: Mapping[str, Iterable[str]]) -> str:
    """``unknown key a.b: did you mean a.c?`` for a key the config lacks; ``targets``: the
    keyword arguments of the constructor at a node (``{"trainer": Trainer's}``), suggested with
    Hydra's ``+`` when the config does not already hold them. Empty when nothing is close."""
    keys = flat_keys(config or {})
    parent, _, leaf = key.rpartition(".")
    above = f"{parent}." if parent else ""
    siblings = [k.rpartition(".")[2] for k in keys if k.rpartition(".")[0] == parent]
    close = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.6)
    if close:
        return f"unknown key {key}: did you mean {above}{close[0]}?"
    # Only now the constructor's arguments: importing it (the Trainer: Lightning) costs seconds.
    accepted = [a for a in targets.get(parent, ()) if a not in siblings]
    close = difflib.get_close_matches(leaf, accepted, n=1, cutoff=0.6)
    if close:  # not in the config yet: Hydra adds a key with "+"
        return f"unknown key {key}: did you mean +{above}{close[0]}?"
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.8)  # a misspelt group: modle.name
    if close:
        return f"unknown key {key}: did you mean {close[0]}?"
    by_leaf = {}
    for k in sorted(keys, key=len):  # a key at the wrong level: the shortest path wins
        by_leaf.setdefault(k.rpartition(".")[2], k)
    close = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.8)
    return f"unknown key {key}: did you mean {by_leaf[close[0]]}?" if close else ""


def unknown_option(group: str, option: str, options: list[str]) -> str:
    """``no model config named resnet50; ...`` with the group's options and, for models, the
    route to torchvision's and timm's."""
    text = f"no {group} config named {option}"
    close = difflib.get_close_matches(option, options, n=1, cutoff=0.6)
    torchvision = group == "model" and _is_torchvision_model(option)
    if torchvision:
        text += f"; {option} is torchvision's: {TORCHVISION_ROUTE.format(option)}."
    elif close:
        text += f"; did you mean {group}={close[0]}?"
    else:
        text += "."
    text += f" The {group} configs: {', '.join(options)}"
    if group == "model" and not torchvision:
        text += f"; torchvision's and timm's models: {TORCHVISION_ROUTE.format('<name>')}"
    return text + f"; your own: ./conf/{group}/<name>.yaml."


def flat_keys(config: Mapping, prefix: str = "") -> list[str]:
    """Every key of a nested mapping as a dotted path (``trainer.max_epochs``), groups too."""
    keys = []
    for name, value in config.items():
        path = f"{prefix}{name}"
        keys.append(path)
        if isinstance(value, Mapping):
            keys.extend(flat_keys(value, f"{path}."))
    return keys


def nest(config: dict, node: str, value: dict) -> None:
    """Put ``value`` at the dotted path ``node`` of ``config`` (``nest(c, "a.b", v)``)."""
    *above, last = node.split(".")
    for part in above:
        config = config.setdefault(part, {})
    config[last] = value


def keyword_arguments(target: str) -> list[str]:
    """The keyword arguments of the class or function ``target`` names (empty when it cannot be
    imported or has no signature)."""
    from hydra.utils import get_object

    try:
        parameters = inspect.signature(get_object(target)).parameters
    except (ImportError, TypeError, ValueError, AttributeError):
        return []
    return [
        p.name
        for p in parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
    ]


def target_of(config: Mapping | None, node: str) -> str | None:
    """The ``_target_`` of the config node at the dotted path ``node``, if any."""
    for part in node.split(".") if node else []:
        if not isinstance(config, Mapping):
            return None
        config = config.get(part)
    return config.get("_target_") if isinstance(config, Mapping) else None


def unexpected_keyword(message: str) -> str | None:
    """The argument a ``TypeError`` names: ``... got an unexpected keyword argument 'x'``."""
    found = re.search(r"unexpected keyword argument '(\w+)'", message)
    return found.group(1) if found else None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_torchvision_model(name: str) -> bool:
    try:
        from torchvision.models import list_models
    except ImportError:
        return False
    return name in list_models()
