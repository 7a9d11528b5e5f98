"""``python -m lightning_cls.calibrate ckpt_path=... [data=...]``: calibrate a trained checkpoint.

Fits temperature scaling and, with ``reject=<name>``, a rejection rule, with
``calibration.conformal=<alpha>`` prediction sets (``calibration.conformal_method=aps|raps``)
on the validation split (``Calibrator.fit``, ``lightning_cls.training.calibration``; its
options: the ``calibration`` group, conf/calibration/default.yaml), then writes a calibrated copy of the checkpoint
to ``output`` (default: ``calibrated.ckpt`` in the run folder; ``output=<ckpt_path>`` replaces
the given file atomically, with a log line), ``results.json`` (ECE before and after, on
validation and on the test split when the data has one) and ``reliability.png``. The same
happens after training with ``calibration=default``. Export the calibrated checkpoint and every
artifact carries the temperature and the rule; predict and serve apply them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from lightning_cls import config_dir
from lightning_cls.cli import run_cli
from lightning_cls.cli.run_config import (
    checkpoint_datamodule,
    checkpoint_file,
    with_checkpoint_data,
)
from lightning_cls.fileio import atomic_write_text

log = logging.getLogger(__name__)


def calibrate_checkpoint(cfg: DictConfig) -> dict:
    cfg.ckpt_path = checkpoint_file(cfg.ckpt_path)  # a training run's folder: its best .ckpt
    ckpt = Path(str(cfg.ckpt_path))
    if not ckpt.is_file():
        raise FileNotFoundError(
            f"Checkpoint not found: ckpt_path={cfg.ckpt_path!r}; pass the path of a .ckpt file."
        )
    if ckpt.suffix != ".ckpt":
        raise ValueError(
            f"ckpt_path={str(ckpt)!r} is not a Lightning checkpoint (.ckpt); calibrate the "
            "checkpoint, then export it (the temperature travels into every artifact)."
        )
    out = Path(cfg.paths.output_dir)
    # Imported here (numpy): --help and the checkpoint checks above load no array library;
    # building the Calibrator checks its options, a typo's one line before torch loads.
    from lightning_cls.inference.trust import reject_from_config
    from lightning_cls.training.calibration import Calibrator, update_checkpoint

    options = OmegaConf.to_container(cfg.calibration, resolve=True)
    calibrator = Calibrator.from_options(
        {**options, "diagram": out / "reliability.png"}, reject_from_config(cfg)
    )
    # Imported here: --help and a config error load no torch (tests/test_layers.py).
    import pytorch_lightning as pl

    from lightning_cls.inference import load_torch_model

    cfg = with_checkpoint_data(cfg, ckpt)  # the run's data unless data= was given
    pl.seed_everything(cfg.seed, workers=True)
    net, spec = load_torch_model(ckpt)
    datamodule = checkpoint_datamodule(cfg, spec, "fit", f"The checkpoint {ckpt}")
    splits = getattr(datamodule, "splits", None) or {}
    if "val" not in splits:
        raise ValueError(
            f"data={cfg.data.name} keeps no validation images in memory (splits['val']); "
            "calibrate with an in-memory data source of the same images (e.g. data=imagefolder)."
        )
    result = calibrator.fit(net, spec, splits)  # the call train's Calibrate callback makes
    target = update_checkpoint(ckpt, cfg.output, result.spec_updates)
    report = {
        "ckpt_path": str(ckpt),
        "calibrated_ckpt": str(target),
        "calibration": result.report(),
    }
    atomic_write_text(out / "results.json", json.dumps(report, indent=2) + "\n")
    log.info("Calibrated checkpoint: %s (every number: %s)", target, out / "results.json")
    return report


@hydra.main(config_path=config_dir(), config_name="calibrate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    calibrate_checkpoint(cfg)


if __name__ == "__main__":
    run_cli(main)
