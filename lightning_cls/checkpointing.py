"""Finding checkpoints to resume from, and checking that one fits a module before using it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

log = logging.getLogger(__name__)

LAST = "last"
_MAX_LISTED = 8  # keys listed per category in an incompatibility message


def resolve_ckpt_path(
    ckpt_path: str | None, ckpt_root: Path, pattern: str = "**/last*.ckpt"
) -> str | None:
    """Turn the ``ckpt_path`` setting into a checkpoint file (or None for a fresh start).

    ``None`` → None; ``"last"`` → the newest file matching the glob ``pattern`` under
    ``ckpt_root`` (train.py passes the layout of single runs of one experiment, so a sweep
    job's or another experiment's checkpoint never matches); anything else must be an
    existing file.
    """
    if ckpt_path is None:
        return None
    if str(ckpt_path) == LAST:
        root = Path(ckpt_root)
        candidates = sorted(root.glob(pattern), key=lambda p: p.stat().st_mtime)
        if not candidates:
            raise FileNotFoundError(
                f"ckpt_path=last but no last.ckpt exists under {root}; train this experiment "
                "first (the default callbacks write last.ckpt at every epoch end), or pass "
                "ckpt_path=<path to a .ckpt file>."
            )
        log.info("Resuming from the latest checkpoint of this experiment: %s", candidates[-1])
        return str(candidates[-1])
    path = Path(ckpt_path)
    if path.is_dir():
        raise FileNotFoundError(
            f"ckpt_path={ckpt_path} is a directory; pass a .ckpt file inside it, or ckpt_path=last."
        )
    if not path.is_file():
        raise FileNotFoundError(
            f"Checkpoint not found: ckpt_path={ckpt_path}; check the path, or use ckpt_path=last "
            f"to resume the latest run under {ckpt_root}."
        )
    return str(path)


def network_state_dict(
    state: Mapping[str, torch.Tensor], attribute: str = "net"
) -> dict[str, torch.Tensor]:
    """Keys of the bare network: drop the LightningModule's ``<attribute>.`` prefix and the
    ``_orig_mod.`` that a ``torch.compile`` wrapper inserts; skip metric buffers. A state
    without that prefix (already a bare network's) keeps all its keys."""
    prefix = f"{attribute}."
    has_prefix = any(k.startswith(prefix) for k in state)
    out = {}
    for key, value in state.items():
        if has_prefix:
            if not key.startswith(prefix):
                continue  # metrics, criterion
            key = key[len(prefix) :]
        out[key.replace("_orig_mod.", "")] = value
    return out


def state_dict_differences(
    saved: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]
) -> dict[str, list[str]]:
    """Keys missing from ``saved``, unexpected in it, and present in both with other shapes."""
    missing = sorted(set(expected) - set(saved))
    unexpected = sorted(set(saved) - set(expected))
    shapes = [
        f"{key}: checkpoint {tuple(saved[key].shape)} vs model {tuple(expected[key].shape)}"
        for key in sorted(set(saved) & set(expected))
        if hasattr(saved[key], "shape") and tuple(saved[key].shape) != tuple(expected[key].shape)
    ]
    return {"missing": missing, "unexpected": unexpected, "shape": shapes}


def check_compatible(ckpt_path: str | Path, module: nn.Module) -> None:
    """Raise a ``ValueError`` naming the keys and shapes that differ between a checkpoint and
    ``module`` (a LightningModule, or a bare network for a ``model_weights.pt`` file)."""
    path = Path(ckpt_path)
    if not path.is_file():
        raise FileNotFoundError(f"Checkpoint not found: {path}; check the path.")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated file, not a torch file, ...
        raise ValueError(
            f"Cannot read checkpoint {path} ({type(err).__name__}: {err}); the file is damaged or "
            "not a checkpoint. Resume from another one (e.g. the best or an earlier last.ckpt)."
        ) from err
    saved = ckpt.get("state_dict", ckpt) if isinstance(ckpt, dict) else None
    if not isinstance(saved, dict):
        raise ValueError(
            f"{path} holds a {type(ckpt).__name__} with no state_dict; it is not a model "
            "checkpoint. Pass a Lightning .ckpt or a model_weights.pt written by training."
        )
    trained = ckpt.get("hyper_parameters") or {}
    ours = dict(getattr(module, "hparams", {}) or {})
    check_same_data(trained, ours, f"Checkpoint {path}", data_name="this run's data")
    diff = state_dict_differences(saved, module.state_dict())
    if not any(diff.values()):
        return
    raise ValueError(_describe(path, diff, trained, module))


def check_same_data(
    trained: Mapping[str, Any],
    data: Mapping[str, Any],
    what: str = "The checkpoint",
    data_name: str = "the data",
) -> None:
    """Raise a ``ValueError`` when ``data`` describes other images than a model was trained on.

    ``trained`` is what the model carries (a checkpoint's ``hyper_parameters``, an artifact's
    metadata), ``data`` what the data provides (``ImageDataModule.meta``, or the hyper-parameters
    of the module about to be trained). Compared when both sides have them: the class *names*
    in order (same count but other names is an error too), ``num_channels`` and ``image_size``.
    The message lists the difference. Used before resuming, evaluating and calibrating.
    """
    problems = []
    ours, theirs = trained.get("classes"), data.get("classes")
    if ours is not None and theirs is not None and list(ours) != list(theirs):
        problems.append(_class_difference(list(ours), list(theirs), data_name))
    for key in ("num_channels", "image_size"):
        if trained.get(key) is not None and data.get(key) is not None and trained[key] != data[key]:
            problems.append(f"{key}={trained[key]} but {data_name} has {key}={data[key]}")
    if problems:
        raise ValueError(
            f"{what} was trained on other data: " + "; ".join(problems) + ". Use data with the "
            "same class folders and image shape as the run that wrote it, or train a new model."
        )


def _class_difference(trained: list[str], data: list[str], data_name: str) -> str:
    only_trained = [c for c in trained if c not in data]
    only_data = [c for c in data if c not in trained]
    if not only_trained and not only_data:
        return (
            f"the same {len(trained)} classes in another order (class index i means another "
            f"class): trained {_shown(trained)}, {data_name} {_shown(data)}"
        )
    parts = [f"{len(trained)} classes vs {len(data)} in {data_name}"]
    if only_trained:
        parts.append(f"only in the model: {_shown(only_trained)}")
    if only_data:
        parts.append(f"only in {data_name}: {_shown(only_data)}")
    return "classes differ (" + ", ".join(parts) + ")"


def _shown(items: list[str]) -> str:
    more = f" (+{len(items) - _MAX_LISTED} more)" if len(items) > _MAX_LISTED else ""
    return "[" + ", ".join(map(str, items[:_MAX_LISTED])) + "]" + more


def _describe(path: Path, diff: dict[str, list[str]], hparams: dict, module: nn.Module) -> str:
    lines = [f"Checkpoint {path} does not fit this model:"]
    for kind, title in (
        ("shape", "shapes differ"),
        ("missing", "missing from checkpoint"),
        ("unexpected", "in checkpoint but not in model"),
    ):
        items = diff[kind]
        if items:
            shown = ", ".join(items[:_MAX_LISTED])
            more = f" (+{len(items) - _MAX_LISTED} more)" if len(items) > _MAX_LISTED else ""
            lines.append(f"  {title}: {shown}{more}")
    if any("_orig_mod." in k for k in diff["unexpected"]):
        lines.append(
            "  The checkpoint comes from a torch.compile'd wrapper (keys contain '_orig_mod.'); "
            "strip that prefix, or compile with lightning_cls.callbacks.CompileModel next time."
        )
    ours = dict(getattr(module, "hparams", {}) or {})
    changed = [
        f"{k}={hparams[k]!r} (model has {ours[k]!r})"
        for k in ("model_name", "model_kwargs", "image_size", "num_channels", "classes")
        if k in hparams and k in ours and hparams[k] != ours[k]
    ]
    if changed:
        lines.append("  The checkpoint was trained with " + "; ".join(changed) + ".")
    lines.append("  Use the same model/data settings as the run that wrote it, or start fresh.")
    return "\n".join(lines)
