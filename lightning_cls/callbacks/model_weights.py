"""``SaveModelWeights``: write the bare network's ``state_dict`` next to the best checkpoint.

``model_weights.pt`` is the portable artifact: no Lightning, no optimizer, no pickled code —
``create_model(name, **kwargs).load_state_dict(torch.load(path, weights_only=True))`` in any
script. It holds the best checkpoint's weights when there is one, else the final weights.
``model_weights.json`` beside it holds the module's hyperparameters (model name and options,
classes, mean/std, input size), so the pair is self-describing without the ``.ckpt``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytorch_lightning as pl
import torch

from lightning_cls.fileio import atomic_path
from lightning_cls.inference.network import network_state_dict

log = logging.getLogger(__name__)


class SaveModelWeights(pl.Callback):
    def __init__(self, filename: str = "model_weights.pt", attribute: str = "net"):
        self.filename, self.attribute = filename, attribute
        self.path: Path | None = None

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        best = getattr(trainer.checkpoint_callback, "best_model_path", "") or ""
        if best and Path(best).is_file():
            ckpt = torch.load(best, map_location="cpu", weights_only=True)
            state = network_state_dict(ckpt["state_dict"], self.attribute)
            # The best epoch's hyperparameters: what was chosen with those weights (a
            # multi-label threshold), not the last epoch's.
            hparams = ckpt.get("hyper_parameters") or dict(pl_module.hparams)
            folder = Path(best).parent
        else:
            net = getattr(pl_module, self.attribute)
            state = {k: v.detach().cpu() for k, v in net.state_dict().items()}
            hparams = dict(pl_module.hparams)
            folder = Path(trainer.default_root_dir)
        self.path = folder / self.filename
        if trainer.is_global_zero:
            with atomic_path(self.path) as tmp:
                torch.save(state, tmp)
            meta = json.dumps(_plain(dict(hparams)), indent=2, sort_keys=True)
            with atomic_path(self.path.with_suffix(".json")) as tmp:
                tmp.write_text(meta + "\n")
            log.info("Saved the network weights (%s) to %s", "best" if best else "final", self.path)


def _plain(value):
    """hparams -> JSON-able containers (tuples become lists; anything else its repr)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)
