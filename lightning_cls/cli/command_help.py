"""Each command's ``--help``: titled with the command, its required arguments, its own groups.

Hydra's help names the job after the module's file (``__main__ is powered by Hydra`` for
``python -m lightning_cls.serve``) and lists every config group of the search path, so serve's
help offered ``model``, ``optimizer`` and ``trainer``. ``conf/hydra/default.yaml`` replaces the
template (``hydra.help``, Hydra's documented way to change the help) with one whose groups
section is ``${command_help:}``: this resolver, given the composed config (``_root_``), lists
the keys still ``???`` (what the command requires) and the groups of the command's own defaults
list (``hydra.runtime.choices``) with their options and the one chosen. ``run_cli`` registers it
for ``--help`` only.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf


def register() -> None:
    if not OmegaConf.has_resolver("command_help"):
        OmegaConf.register_new_resolver("command_help", command_help)


def command_help(*, _root_: DictConfig) -> str:
    """The help's middle: required arguments, then the command's config groups."""
    required = []
    for key in (k for k in _root_ if k != "hydra"):  # hydra's own ??? (job.num) is not asked
        if OmegaConf.is_missing(_root_, key):
            required.append(key)
        elif OmegaConf.is_config(_root_._get_node(key)):
            required += [f"{key}.{k}" for k in OmegaConf.missing_keys(_root_[key])]
    required.sort()
    lines = ["== Required arguments ==", ""]
    lines += [f"{key}=..." for key in required] or ["(none: every value has a default)"]
    lines += ["", "== Configuration groups ==", "Compose your configuration from those groups "
              "(group=option; the current choice in brackets)", ""]  # fmt: skip
    choices = OmegaConf.select(_root_, "hydra.runtime.choices") or {}
    for group in sorted(g for g in choices if g.split("/")[0] != "hydra"):
        options = ", ".join(group_options(group)) or "(none)"
        lines.append(f"{group}: {options} [{choices[group] or 'null'}]")
    return "\n".join(lines)


def group_options(group: str) -> list[str]:
    """The options of ``group`` on the search path (``./conf`` included), parts (``_*``) left
    out; [] when Hydra's loader is not running (a config composed outside a command)."""
    from hydra.core.global_hydra import GlobalHydra

    if not GlobalHydra.instance().is_initialized():
        return []
    loader = GlobalHydra.instance().config_loader()
    return [name for name in loader.get_group_options(group) if not name.startswith("_")]
