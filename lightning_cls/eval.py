"""``python -m lightning_cls.eval ckpt_path=... [data=...]``: test metrics of a checkpoint.

The checkpoint carries the preprocessing it was trained with (mean/std); the data config only
says where the test images come from, so any folder with a ``test/`` split can be evaluated.
``split=val`` evaluates the validation split instead (pass the training run's ``seed`` where the
DataModule carves validation from train by seed); ``tta_flip``/``tta_translate`` override the
checkpoint's test-time augmentation (``null``: the checkpoint's own).

``ckpt_path`` may also be an exported model (``model.onnx``, ``.xml``, ``.torchscript``, ``.pt2``,
... anything ``load_artifact`` reads): the split's top-1 accuracy (multi-label: every label
right) and the open-set report (``ood.near=DIR ood.far=[DIR,...]``) are then computed with the
artifact's own runtime, without Lightning; ``data=`` says where the images are (else the run's
config beside the artifact, as for a checkpoint).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lightning_cls import config_dir
from lightning_cls.cli import run_cli
from lightning_cls.cli.option_types import check_annotated_types
from lightning_cls.cli.printing import to_floats
from lightning_cls.cli.run_config import (
    checkpoint_datamodule,
    checkpoint_file,
    with_checkpoint_data,
)
from lightning_cls.fileio import atomic_write_text

if TYPE_CHECKING:
    from lightning_cls.module import ClassificationModule

log = logging.getLogger(__name__)


def evaluate(cfg: DictConfig) -> dict[str, float]:
    cfg.ckpt_path = checkpoint_file(cfg.ckpt_path)  # a training run's folder: its best .ckpt
    if is_artifact(cfg.ckpt_path):
        return evaluate_artifact(cfg)
    if not Path(str(cfg.ckpt_path)).is_file():
        raise FileNotFoundError(
            f"Checkpoint not found: ckpt_path={cfg.ckpt_path!r}; pass the path of a .ckpt file "
            "(quote paths containing '=' for Hydra: 'ckpt_path=\"/x/epoch=3.ckpt\"')."
        )
    split = cfg.get("split", "test")
    if split not in ("test", "val"):
        raise ValueError(f"split={split!r} is not evaluable; use split=test or split=val.")
    # Imported here: --help, a config error and the checks above do not pay for Lightning,
    # torchmetrics and the callbacks (tests/test_layers.py runs each and checks sys.modules).
    import pytorch_lightning as pl

    from lightning_cls.figures.mosaic import write_split_mosaic
    from lightning_cls.module import ClassificationModule
    from lightning_cls.training.trainer import build_trainer

    trainer_options = OmegaConf.to_container(cfg.trainer, resolve=True)
    check_annotated_types(pl.Trainer.__init__, trainer_options, "trainer")  # max_epochs=abc
    cfg = with_checkpoint_data(cfg, cfg.ckpt_path)  # the run's data unless data= was given
    pl.seed_everything(cfg.seed, workers=True)
    module = ClassificationModule.load_from_checkpoint(cfg.ckpt_path, map_location="cpu")
    tta = _override_tta(module, cfg.get("tta_flip"), cfg.get("tta_translate"))
    stage = "test" if split == "test" else "fit"
    where = f"The checkpoint {cfg.ckpt_path}"
    datamodule = checkpoint_datamodule(cfg, module.hparams, stage, where)
    loggers = [instantiate(lg) for lg in (cfg.get("logger") or {}).values()]
    trainer: pl.Trainer = build_trainer(
        partial(instantiate, cfg.trainer),
        cfg.trainer.precision,
        cfg.trainer.accelerator,
        loggers=loggers,
    )
    run = trainer.test if split == "test" else trainer.validate
    metrics = to_floats(run(module, datamodule=datamodule)[0])
    out = Path(cfg.paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = {"ckpt_path": str(cfg.ckpt_path), "split": split, **tta, split: metrics}
    results[f"per_class_{split}"] = module.per_class_results(split, trainer.callback_metrics)
    from lightning_cls.inference.spec import InputSpec
    from lightning_cls.training.calibration import prediction_sets_report

    spec = InputSpec.from_hparams(module.hparams)  # the checkpoint's, with the TTA overrides
    sets = prediction_sets_report(module.net, spec, datamodule.splits[split], split)
    if sets:  # conformal prediction sets: how often they hold the true label here, how large
        results["sets"] = sets
        log.info("Prediction sets on %s: %s", split, json.dumps(sets))
    if cfg.get("prediction_mosaic", True):
        explain = None
        if cfg.get("explain"):  # heat maps over the tiles: gradcam or cam
            from lightning_cls.explain import Explainer  # only with explain=: the CAM hooks

            explain = Explainer(module.net, spec, cfg.explain).heatmaps
        mosaic = out / f"predictions_{split}.png"
        write_split_mosaic(module, datamodule, split, mosaic, explain=explain)
    from lightning_cls.figures.open_set import write_ood_figures
    from lightning_cls.inference.open_set_report import ood_sets, open_set_scores

    ood = ood_sets(cfg.get("ood"))  # ood=DIR: short for ood.far=DIR
    if ood:  # folders of unknown classes: the open-set report, its figures in the run folder
        known = datamodule.splits[split]
        found = open_set_scores(cfg.ckpt_path, known, ood, cfg.get("ood_score"))
        results["ood"] = write_ood_figures(found, out)
        log.info("Out-of-distribution (open-set report): %s", json.dumps(results["ood"]))
    atomic_write_text(out / "results.json", json.dumps(results, indent=2) + "\n")
    log.info("%s metrics of %s (%s): %s", split, cfg.ckpt_path, tta, json.dumps(metrics))
    return metrics


def is_artifact(path) -> bool:
    """An exported model that exists (a file or an ``.mlpackage`` folder), not a checkpoint."""
    path = Path(str(path))
    return path.suffix not in (".ckpt", "") and path.exists()


def evaluate_artifact(cfg: DictConfig) -> dict[str, float]:
    """``eval ckpt_path=model.onnx``: the split's accuracy and the open-set report, with the
    artifact's runtime (no Lightning); results.json as for a checkpoint."""
    split = cfg.get("split", "test")
    if split not in ("test", "val"):
        raise ValueError(f"split={split!r} is not evaluable; use split=test or split=val.")
    given = {k: cfg.get(k) for k in ("tta_flip", "tta_translate") if cfg.get(k) is not None}
    if given:
        raise ValueError(
            f"{', '.join(f'{k}={v}' for k, v in given.items())}: an exported model's test-time "
            "augmentation is fixed at export; drop the override, or evaluate the .ckpt."
        )
    from lightning_cls.figures.open_set import write_ood_figures
    from lightning_cls.inference import load_artifact
    from lightning_cls.inference import open_set_report as report

    predictor = load_artifact(cfg.ckpt_path)
    cfg = with_checkpoint_data(cfg, cfg.ckpt_path)  # the run's data unless data= was given
    stage = "test" if split == "test" else "fit"
    where = f"The exported model {cfg.ckpt_path}"
    datamodule = checkpoint_datamodule(cfg, predictor.spec, stage, where)
    known = datamodule.splits[split]
    logits, _ = predictor.image_outputs(known.images)
    correct = report.correct_answers(predictor.task, logits, known.labels)
    metrics = {f"{split}/acc": round(float(correct.mean()), 6)}
    out = Path(cfg.paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = {"ckpt_path": str(cfg.ckpt_path), "split": split, split: metrics}
    ood = report.ood_sets(cfg.get("ood"))
    if ood:
        found = report.open_set_scores(cfg.ckpt_path, known, ood, cfg.get("ood_score"))
        results["ood"] = write_ood_figures(found, out)
        log.info("Out-of-distribution (open-set report): %s", json.dumps(results["ood"]))
    atomic_write_text(out / "results.json", json.dumps(results, indent=2) + "\n")
    log.info("%s metrics of %s: %s", split, cfg.ckpt_path, json.dumps(metrics))
    return metrics


def _override_tta(module: ClassificationModule, flip, translate) -> dict:
    """Apply the ``tta_flip``/``tta_translate`` overrides (None keeps the checkpoint's) and
    return the TTA the evaluation uses."""
    if translate is not None and (
        isinstance(translate, bool) or not isinstance(translate, int) or translate < 0
    ):
        raise ValueError(
            f"tta_translate={translate!r} is not a pixel shift; use an int >= 0 (0: none, "
            "1: airbench's level 2) or null for the checkpoint's own."
        )
    tta = module.tta  # inference/tta.py: TTA
    if flip is not None:
        tta = dataclasses.replace(tta, flip=bool(flip))
    if translate is not None:
        tta = dataclasses.replace(tta, translate=translate)
    module.hparams["tta"] = tta.to_dict()
    return {"tta_flip": tta.flip, "tta_translate": tta.translate}


@hydra.main(config_path=config_dir(), config_name="eval", version_base="1.3")
def main(cfg: DictConfig) -> None:
    evaluate(cfg)


if __name__ == "__main__":
    run_cli(main)
