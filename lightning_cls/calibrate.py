"""``python -m lightning_cls.calibrate ckpt_path=... [data=...]``: calibrate a trained checkpoint.

Fits temperature scaling and, with ``reject=msp|energy``, a rejection rule, with
``conformal=<alpha>`` prediction sets (``conformal_method=aps|raps``) on the validation
split (``lightning_cls.training.calibration``), then writes a calibrated copy of the checkpoint
to ``output`` (default: ``calibrated.ckpt`` in the run folder; ``output=<ckpt_path>`` replaces
the given file atomically, with a log line), ``results.json`` (ECE before and after, on
validation and on the test split when the data has one) and ``reliability.png``. The same
happens after training with ``calibrate=true``. Export the calibrated checkpoint and every
artifact carries the temperature and the rule; predict and serve apply them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig

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
    # Imported here (numpy): --help and the checkpoint checks above load no array library.
    from lightning_cls.inference.conformal import check_options as check_conformal_options
    from lightning_cls.inference.trust import (
        check_keep,
        check_rule_options,
        check_temperature_fit,
        reject_from_config,
    )

    # a typo's one line before anything loads
    reject = reject_from_config(cfg)
    check_rule_options(reject, cfg.reject_keep)
    temperature = check_temperature_option(cfg.temperature)
    check_keep(cfg.reject_keep)
    check_conformal_options(cfg.conformal, cfg.conformal_method)
    check_temperature_fit(cfg.temperature_fit)
    # Imported here: --help and a config error load no torch (tests/test_layers.py).
    import pytorch_lightning as pl

    from lightning_cls.inference import load_torch_model
    from lightning_cls.training.calibration import calibrate, update_checkpoint

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
    out = Path(cfg.paths.output_dir)
    result = calibrate(
        net,
        spec,
        splits["val"],
        splits.get("test"),
        temperature=temperature,
        reject=reject,
        keep=cfg.reject_keep,
        choose_threshold=bool(cfg.choose_threshold),
        diagram=out / "reliability.png",
        train=splits.get("train"),
        conformal=cfg.conformal,
        conformal_method=cfg.conformal_method,
        temperature_fit=cfg.temperature_fit,
    )
    target = update_checkpoint(ckpt, cfg.output, result.spec_updates)
    report = {
        "ckpt_path": str(ckpt),
        "calibrated_ckpt": str(target),
        "calibration": result.report(),
    }
    atomic_write_text(out / "results.json", json.dumps(report, indent=2) + "\n")
    log.info("Calibrated checkpoint: %s (every number: %s)", target, out / "results.json")
    return report


def check_temperature_option(value):
    """``temperature=``: true (fit one), false (keep the checkpoint's) or a number > 0 (use it);
    anything else is one line naming the value."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value > 0 and value != float("inf"):
        return float(value)
    raise ValueError(
        f"temperature={value!r} is not true, false or a number > 0; temperature=true fits one on "
        "validation, temperature=false keeps the checkpoint's, temperature=1.5 sets it."
    )


@hydra.main(config_path=config_dir(), config_name="calibrate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    calibrate_checkpoint(cfg)


if __name__ == "__main__":
    run_cli(main)
