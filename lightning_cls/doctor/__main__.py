"""``python -m lightning_cls.doctor data=...``: check a dataset before training.

Reads top to bottom: check the settings → the recipe the label check's ``kfold`` probe trains
per fold (``model=``, ``optimizer=``, ``scheduler=``, ``trainer.accelerator/precision``; or
an ``experiment=``'s whole recipe: ``experiment=cifar10_fast``) →
build the DataModule the config names (as training would) → run every check → write
``report.md``, ``report.json`` and the mosaics into the run folder. The data is only read;
``doctor.write_index=clean.csv`` also writes the files worth keeping.
"""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lightning_cls import config_dir
from lightning_cls.cli import run_cli
from lightning_cls.cli.option_types import check_option_types

log = logging.getLogger(__name__)


def doctor(cfg: DictConfig) -> dict:
    # Imported here: --help and config errors stay light (tests/test_layers.py).
    from lightning_cls.doctor.run import DoctorOptions, diagnose

    settings = OmegaConf.to_container(cfg.doctor, resolve=True)
    unknown = sorted(set(settings) - set(DoctorOptions.__dataclass_fields__))
    if unknown:
        raise ValueError(f"Unknown doctor option(s) {unknown}; see conf/doctor.yaml.")
    settings["drop"] = tuple(settings.get("drop") or ())
    options = DoctorOptions(**settings, seed=cfg.seed)
    options.check()  # a typo's one line before any data is read or network built
    recipe = None
    if options.probe == "kfold" and options.label_errors:
        recipe = train_recipe(cfg)
    datamodule = instantiate(cfg.data)
    datamodule.name = cfg.data.name
    out = Path(cfg.paths.output_dir)
    result = diagnose(datamodule, out, options, recipe)
    log.info(
        "Data check of data=%s: %d duplicate groups (%d across splits), %d likely label "
        "errors%s, %d unreadable files; report: %s",
        cfg.data.name,
        len(result["duplicates"]),
        sum(g["cross_split"] for g in result["duplicates"]),
        len(result["label_issues"]),
        "" if result.get("label_probe", {}).get("reliable", True) else " (NOT TRUSTED: see report)",
        len(result["files"].get("unreadable", [])),
        out / "report.md",
    )
    return result


def train_recipe(cfg: DictConfig):
    """What ``doctor.probe=kfold`` trains per fold, from the composed config: ``model=``,
    ``optimizer=``, ``scheduler=``, ``tta=`` (its held-out predictions) and, where an
    ``experiment=`` sets them, its ``param_groups``, ``callbacks`` and ``task.label_smoothing``
    (else ``label_smoothing``)."""
    from lightning_cls.doctor.run import TrainRecipe

    optimizer = instantiate(cfg.optimizer)
    scheduler = instantiate(cfg.scheduler) if cfg.get("scheduler") else None
    check_option_types(optimizer, "optimizer")
    check_option_types(scheduler, "scheduler")
    model = OmegaConf.to_container(cfg.model, resolve=True)
    smoothing = OmegaConf.select(cfg, "task.label_smoothing", default=cfg.label_smoothing)
    return TrainRecipe(
        model_name=model.pop("name"),
        model_kwargs=model,
        optimizer=optimizer,
        scheduler=scheduler,
        param_groups=instantiate(cfg.param_groups) if cfg.get("param_groups") else None,
        callbacks=[instantiate(c) for c in (cfg.get("callbacks") or {}).values()],
        channels_last=bool(cfg.data.get("channels_last")),
        accelerator=cfg.trainer.accelerator,
        precision=str(cfg.trainer.precision),
        task={"name": "multiclass", "label_smoothing": smoothing},
        tta=instantiate(cfg.tta) if cfg.get("tta") else None,  # conf/tta: a TTA, checked here
    )


@hydra.main(config_path=config_dir(), config_name="doctor", version_base="1.3")
def main(cfg: DictConfig) -> None:
    doctor(cfg)


if __name__ == "__main__":
    run_cli(main)
