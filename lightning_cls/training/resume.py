"""Resuming: finding the checkpoint for ``ckpt_path``, checking that it fits the module, and
the stages a restarted job skips (``Stages``).

The data comparison itself (classes, channels, image size) is
``lightning_cls.inference.network.check_same_data``, shared with eval and export."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lightning_cls.fileio import atomic_write_text
from lightning_cls.inference.network import MAX_LISTED, check_same_data

log = logging.getLogger(__name__)

LAST = "last"


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


def _describe(path: Path, diff: dict[str, list[str]], hparams: dict, module: nn.Module) -> str:
    lines = [f"Checkpoint {path} does not fit this model:"]
    for kind, title in (
        ("shape", "shapes differ"),
        ("missing", "missing from checkpoint"),
        ("unexpected", "in checkpoint but not in model"),
    ):
        items = diff[kind]
        if items:
            shown = ", ".join(items[:MAX_LISTED])
            more = f" (+{len(items) - MAX_LISTED} more)" if len(items) > MAX_LISTED else ""
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


class Stages:
    """What a job has completed, kept in ``path`` (``<run folder>/stages.json``), so that a
    requeued job skips it: ``train`` (the training loop ended: its metrics), ``fit`` (the fit's
    outcome: best checkpoint, scores, calibration, where the loops stopped), ``test``.

    Every rank keeps the records in memory (and reads the file a previous attempt left);
    ``record`` rewrites the file atomically on rank 0 only (``write``), so a process killed at
    any moment leaves the old file or the new one. Records are JSON: floats round-trip exactly,
    so results.json written from them is bit-equal to the one of an uninterrupted job.
    ``path=None`` keeps them in memory only (nothing is skipped after a restart).
    """

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self.records: dict[str, Any] = {}
        if self.path is not None and self.path.is_file():
            self.records = json.loads(self.path.read_text())
            log.info("%s: this job already completed %s.", self.path, ", ".join(self.records))

    def get(self, name: str) -> Any:
        return self.records.get(name)

    def clear(self, write: bool) -> None:
        """The job is complete (results.json written): forget its stages, so the same command
        again in this folder (more epochs, another test) runs every stage as before."""
        self.records = {}
        if write and self.path is not None:
            self.path.unlink(missing_ok=True)

    def record(self, name: str, value: Any, write: bool) -> None:
        self.records[name] = value
        if write and self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps(self.records, indent=1) + "\n")


def fit_position(trainer) -> dict[str, int]:
    """Where the fit's loops stopped: the epoch and the step that loggers stamp on metrics."""
    return {
        "epoch": trainer.current_epoch,
        "step": trainer.fit_loop.epoch_loop._batches_that_stepped,
    }


def restore_fit_position(trainer, position: dict[str, int]) -> None:
    """Put a fresh trainer where a completed fit left its loops, so the test that follows a
    skipped fit logs at the fit's last step and epoch, as it does after the fit (one curve).
    No public setter exists: the attributes are Lightning's (version pinned in pyproject)."""
    trainer.fit_loop.epoch_progress.current.completed = position["epoch"]
    trainer.fit_loop.epoch_loop._batches_that_stepped = position["step"]
