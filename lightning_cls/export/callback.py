"""``ExportCallback``: export the trained network when ``fit`` ends (``export=...`` in train)."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytorch_lightning as pl
from torch import nn

from lightning_cls.callbacks.calibration import Calibrate
from lightning_cls.export.exporter import ExportConfig, ExportResult, export_model
from lightning_cls.inference import load_torch_model
from lightning_cls.inference.network import build_network, network_state_dict
from lightning_cls.inference.spec import InputSpec

log = logging.getLogger(__name__)


class ExportCallback(pl.Callback):
    """At the end of ``fit``, export the best checkpoint's network (or, with ``use_best=False``
    or no checkpoint, the final weights) as ``config`` says, into ``dirpath`` (default:
    ``<trainer.default_root_dir>/export``). INT8 calibrates on the trainer's DataModule.

    The trainer's ``Calibrate`` callbacks run first (``Calibrate.run``, once per fit), wherever
    they stand in the list, and the artifact's decision (threshold, temperature, rejection rule,
    prediction sets) is the one they handed to the module's task, not one read back from a file.

    An ``AccuracyDropError`` from INT8 propagates: the run fails loudly, after the
    checkpoints and the other exported files are written.
    """

    def __init__(
        self, config: ExportConfig, dirpath: str | Path | None = None, use_best: bool = True
    ):
        self.config, self.dirpath, self.use_best = config, dirpath, use_best
        self.result: ExportResult | None = None

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.config.enabled:
            return
        calibrated = [
            c.run(trainer, pl_module) for c in trainer.callbacks if isinstance(c, Calibrate)
        ]
        if not trainer.is_global_zero:
            return
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        if self.use_best and best:
            log.info("Exporting the best checkpoint %s", best)
            net, spec = load_torch_model(best)
        else:
            net, spec = final_network(pl_module), InputSpec.from_hparams(pl_module.hparams)
        if calibrated:  # the decision the calibration handed to the module's task
            decision = pl_module.decision
            spec = spec.with_decision(threshold=decision.threshold, **decision.trust())
        out = Path(self.dirpath) if self.dirpath else Path(trainer.default_root_dir) / "export"
        datamodule = trainer.datamodule if self.config.needs_data else None
        self.result = export_model(net, spec, out, self.config, datamodule)


def final_network(pl_module: pl.LightningModule) -> nn.Module:
    """A CPU, eval-mode copy of ``pl_module.net`` without compile or DDP wrappers."""
    hparams = pl_module.hparams
    if hparams.get("model_name"):
        net = build_network(
            hparams["model_name"], hparams.get("model_kwargs"), hparams.get("classes")
        )
        net.load_state_dict(network_state_dict(pl_module.state_dict()))
        return net.eval()
    net = getattr(pl_module.net, "_orig_mod", pl_module.net)  # torch.compile wrapper
    return copy.deepcopy(net).cpu().eval()
