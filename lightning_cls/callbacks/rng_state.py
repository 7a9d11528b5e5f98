"""``RngState``: carry the global random generators through a checkpoint for exact resume.

Lightning checkpoints the model, optimizers, schedulers, loops and (stateful) loaders, but not
the global RNGs that batch augmentation (random crop/flip), dropout and mixup draw from. A run
resumed with a fresh ``seed_everything`` would therefore draw different augmentations than the
uninterrupted run. This callback stores the torch (CPU and CUDA), numpy and Python generator
states in the checkpoint and restores them on resume.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch


def collect_rng_states() -> dict[str, Any]:
    """Plain containers and tensors only, so the checkpoint loads with ``weights_only=True``."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, state, gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "torch.cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "python": [version, list(state), gauss],
    }


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    if states.get("torch.cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch.cuda"])
    kind, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    version, state, gauss = states["python"]
    random.setstate((version, tuple(state), gauss))


class RngState(pl.Callback):
    """Save the global RNG states with every checkpoint; restore them when resuming."""

    def state_dict(self) -> dict[str, Any]:
        return {"rng": collect_rng_states()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "rng" in state_dict:
            set_rng_states(state_dict["rng"])
