"""``python -m lightning_cls.train``: fit a classifier, then test its best checkpoint.

Reads top to bottom: compose config → data → module → callbacks/loggers → trainer → fit →
test → results.json. Everything below this file takes plain Python objects.

Data loading happens under the Trainer: ``prepare_data`` (downloads) on one process per
node, ``setup`` on every rank. The module is built from the DataModule's ``spec`` (classes,
mean, std, image size, channels), which every DataModule knows from its data's metadata
(folder names, a ``meta.json``) without loading images; model options left null
(``${data.image_size}`` of ``data=streaming``) are filled from it (``fill_input_options``).
``data.batch_size`` is the global batch: each of the trainer's ``world_size`` processes
loads ``batch_size / world_size`` images per step, so a recipe's learning rate, steps per
epoch and schedule do not change with the number of devices (docs/scaling.md).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from lightning_cls import config_dir
from lightning_cls.cli import run_cli
from lightning_cls.cli.option_types import check_annotated_types, check_option_types
from lightning_cls.cli.printing import print_run, to_floats
from lightning_cls.cli.resolvers import register_resolvers
from lightning_cls.fileio import atomic_write_text

if TYPE_CHECKING:
    import pytorch_lightning as pl

log = logging.getLogger(__name__)


def apply_pretrained_preprocessing(cfg: DictConfig) -> dict:
    """Pretrained weights' own preprocessing as the data defaults: fills ``data.mean``,
    ``data.std`` and ``data.decode_size`` where the config leaves them null (an explicit value
    wins), and warns when ``data.image_size`` differs from the size the weights were trained
    at. Returns what it filled. The values then travel in the checkpoint and export metadata
    through the DataModule's ``spec``."""
    from lightning_cls.models import pretrained_preprocessing  # torch: only when training

    pre = pretrained_preprocessing(OmegaConf.to_container(cfg.model, resolve=True))
    if pre is None:
        return {}
    filled = {
        key: pre[key]
        for key in ("mean", "std", "decode_size")
        if key in cfg.data and cfg.data[key] is None
    }
    with open_dict(cfg.data):
        for key, value in filled.items():
            cfg.data[key] = value
    if filled:
        log.info("Data defaults from the pretrained weights' preprocessing: %s", filled)
    return filled  # a data.image_size other than the weights' is refused by the check after


def train(cfg: DictConfig) -> dict:
    """Run one training job described by ``cfg``; return what goes into results.json."""
    started = time.time()
    optimizer, scheduler = checked_options(cfg)  # a typo's one line comes before Lightning loads
    # Imported here: `--help`, a config error and the checks above do not pay for Lightning,
    # torchmetrics and the callbacks (tests/test_layers.py runs each and checks sys.modules).
    import pytorch_lightning as pl
    from pytorch_lightning.utilities import rank_zero_only

    from lightning_cls.training.loggers import close_loggers
    from lightning_cls.training.resume import restore_fit_position
    from lightning_cls.training.trainer import build_trainer

    trainer_options = OmegaConf.to_container(cfg.trainer, resolve=True)
    check_annotated_types(pl.Trainer.__init__, trainer_options, "trainer")  # max_epochs=abc
    pl.seed_everything(cfg.seed, workers=True)

    apply_pretrained_preprocessing(cfg)
    datamodule = instantiate(cfg.data)  # loads nothing yet: the Trainer calls prepare/setup
    from lightning_cls.models import check_pretrained_preprocessing  # weights vs data: one line

    if hasattr(datamodule, "check_config"):  # data.num_classes=5 on 3 folders: named as set
        datamodule.check_config(("num_classes",))
    allow = cfg.get("allow_preprocessing_mismatch", False)
    model_kwargs = OmegaConf.to_container(cfg.model, resolve=True)
    check_pretrained_preprocessing(model_kwargs, datamodule.spec, allow)
    module = build_module(cfg, datamodule.spec, optimizer, scheduler)
    run = RunCallbacks.from_config(cfg)
    loggers = [instantiate(lg) for lg in (cfg.get("logger") or {}).values()]
    trainer: pl.Trainer = build_trainer(
        partial(instantiate, cfg.trainer),
        cfg.trainer.precision,
        cfg.trainer.accelerator,
        run.callbacks,
        loggers,
    )
    with open_dict(cfg.trainer):  # the config logged and saved says what ran (auto resolved)
        cfg.trainer.precision = str(trainer.precision)
    if rank_zero_only.rank == 0:  # after data, model, trainer: a wrong setting's error comes first
        print_run(OmegaConf.to_container(cfg, resolve=True), verbose=cfg.get("verbose", False))
    datamodule.batch_size = per_device_batch_size(cfg.data.batch_size, trainer.world_size)
    for logger in trainer.loggers:  # the whole config, so runs compare in TensorBoard/MLflow
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    ckpt_path = _resume_from(cfg)
    _continue_next_to(ckpt_path, trainer, module)

    # A requeue signal from here to the end (held since the process started) saves what there
    # is, requeues and exits; the requeued job skips the stages done (callbacks/preemption.py).
    stages = run.preemption.stages
    run.preemption.install_for_job()
    fit = stages.get("fit")  # a requeued job whose fit is complete: not fitted again
    if fit is None:
        if cfg.train:
            trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
        fit = run.fit_record(cfg, trainer)
        run.preemption.complete("fit", fit, trainer)  # kept; a signal until now leaves here
    else:
        restore_fit_position(trainer, fit["position"])  # the test logs where the fit stopped
    tested = stages.get("test")
    if tested is None:
        # The best checkpoint of this fit; without a fit (train=false), the given checkpoint.
        tested = tested_record(cfg, trainer, module, datamodule, fit["best_ckpt"] or ckpt_path, fit)
        run.preemption.complete("test", tested, trainer)  # the last point a signal leaves at

    summary = run_summary(cfg, fit, tested, trainer, started)
    summary["data_fingerprint"] = getattr(datamodule, "fingerprint", None)  # data/fingerprint.py
    if trainer.is_global_zero:
        write_results(cfg, summary)
    stages.clear(trainer.is_global_zero)  # complete: a rerun here runs every stage
    close_loggers(trainer.loggers)  # a W&B run stays open until the process exits otherwise
    run.preemption.uninstall()  # a signal from here on is latched (the job is complete) or default
    return summary


def reject_of(cfg: DictConfig) -> dict | None:
    """The rejection rule the config chooses (``conf/reject``): ``{name, **its options}``."""
    from lightning_cls.inference.trust import reject_from_config

    return reject_from_config(cfg)


def checked_options(cfg: DictConfig) -> tuple:
    """The optimizer and scheduler partials, and every option checked before Lightning loads:
    their types, and the calibration's (the rejection rule's, the prediction sets')."""
    optimizer = instantiate(cfg.optimizer)
    scheduler = instantiate(cfg.scheduler) if cfg.get("scheduler") else None
    check_option_types(optimizer, "optimizer")
    check_option_types(scheduler, "scheduler")
    calibrator_of(cfg)  # the calibration group's options and the rule's
    return optimizer, scheduler


def calibrator_of(cfg: DictConfig):
    """The ``Calibrator`` of the ``calibration`` and ``reject`` groups (Calibrate fits it)."""
    from lightning_cls.training.calibration import Calibrator

    options = OmegaConf.to_container(cfg.calibration, resolve=True)
    diagram = Path(cfg.paths.output_dir) / "reliability.png"
    return Calibrator.from_options({**options, "diagram": diagram}, reject_of(cfg))


def build_module(cfg: DictConfig, spec, optimizer, scheduler):
    """The ``ClassificationModule`` the config describes, for the data's ``spec`` (what the
    DataModule reads from its data's metadata: class names, stored image size, channels,
    mean/std); the model options left null are filled from it."""
    import torch

    from lightning_cls.module import ClassificationModule

    model_kwargs = OmegaConf.to_container(cfg.model, resolve=True)
    module = ClassificationModule(
        model_name=model_kwargs.pop("name"),
        model_kwargs=model_kwargs,
        optimizer=optimizer,
        scheduler=scheduler,
        tta=instantiate(cfg.tta) if cfg.get("tta") else None,  # conf/tta: a TTA
        param_groups=instantiate(cfg.param_groups) if cfg.get("param_groups") else None,
        task=task_options(cfg),  # conf/task/<name>.yaml: the name and all of the task's options
        spec=spec,
        # distill.teacher=<.ckpt/.onnx>: a teacher's soft targets in the loss (Distiller)
        distill=instantiate(cfg.distill) if OmegaConf.select(cfg, "distill.teacher") else None,
        # ood_training=rotation: {name, options}, an auxiliary loss (training/ood_training)
        ood_training=OmegaConf.to_container(cfg.ood_training, resolve=True)
        if OmegaConf.select(cfg, "ood_training.name")
        else None,
    )
    if cfg.data.get("channels_last"):
        module = module.to(memory_format=torch.channels_last)  # weights too, not just inputs
    return module


@dataclass
class RunCallbacks:
    """The job's callbacks, and those whose state the run reads back after the fit."""

    callbacks: list
    preemption: Any
    best_metric: Any
    calibration: Any = None  # calibration=default / reject= / calibration.conformal=
    pruning: Any = None  # a trial job launched by the optuna sweeper

    @classmethod
    def from_config(cls, cfg: DictConfig) -> RunCallbacks:
        from pytorch_lightning.callbacks import ProgressBar

        from lightning_cls.callbacks.best_metric import BestMetric
        from lightning_cls.callbacks.optuna_pruning import OptunaPruning
        from lightning_cls.callbacks.preemption import Preemption
        from lightning_cls.export.callback import ExportCallback

        callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values()]
        preemption = next((c for c in callbacks if isinstance(c, Preemption)), None)
        preemption = preemption or Preemption(
            cfg.paths.ckpt_dir, requeue_signals=(), stop_signals=()
        )
        if cfg.trainer.get("enable_progress_bar") is False:  # the user's flag beats the preset
            callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
        callbacks += [instantiate(c) for c in (cfg.get("tuner") or {}).values()]  # tuner=lr|...
        run = cls(callbacks, preemption, BestMetric(cfg.optimized_metric, cfg.optimized_mode))
        calibrator = calibrator_of(cfg)
        if calibrator.fits_anything:
            from lightning_cls.callbacks.calibration import Calibrate

            run.calibration = Calibrate(calibrator)  # export runs it first, wherever it stands
            callbacks.append(run.calibration)
        export_config = instantiate(cfg.export) if cfg.get("export") else None
        if export_config is not None and export_config.enabled:
            export_dir = Path(cfg.paths.output_dir) / "export"
            callbacks.append(ExportCallback(export_config, dirpath=export_dir))
        callbacks.append(run.best_metric)
        if cfg.optuna.trial_number is not None:
            run.pruning = OptunaPruning(**cfg.optuna, monitor=cfg.optimized_metric)
            callbacks.append(run.pruning)
        return run

    def fit_record(self, cfg: DictConfig, trainer: pl.Trainer) -> dict:
        """What the fit leaves for results.json (and for a requeued job to skip it)."""
        from lightning_cls.training.resume import fit_position

        # The training loop's metrics (kept by the callback: gone after a restart in the fit's
        # last hooks), else the trainer's.
        metrics = (self.preemption.stages.get("train") or {}).get("metrics")
        metrics = metrics or to_floats(trainer.callback_metrics)
        best = self.best_metric.best
        calibration = self.calibration.result if self.calibration else None
        score, best_val = _best_record(trainer, self.best_metric.state_key)
        last_val = {k: v for k, v in metrics.items() if k.startswith("val/")}
        return {
            "best_ckpt": trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else "",
            "best_val_acc": score,
            "objective": best if best is not None else metrics.get(cfg.optimized_metric),
            "pruned_at_epoch": self.pruning.pruned_epoch if self.pruning else None,
            # The tested (best) checkpoint's validation metrics, as saved in it (BestMetric's
            # state); without one (no checkpoint, an older file) the last epoch's.
            "val": best_val or last_val,
            "val_of": "best_ckpt" if best_val else "last_epoch",
            "val_last": last_val,
            # ECE before/after, the temperature and rejection rule (training/calibration.py)
            "calibration": calibration.report() if calibration else None,
            "position": fit_position(trainer),
        }  # fmt: skip


def tested_record(cfg: DictConfig, trainer, module, datamodule, ckpt_path, fit: dict) -> dict:
    """Test ``ckpt_path`` (unless ``test=false`` or the trial was pruned: not worth testing)
    and draw the validation predictions' mosaic; the test's metrics and per-class results."""
    from lightning_cls.figures.mosaic import write_split_mosaic

    metrics: dict = {}
    per_class: dict = {}
    if cfg.test and fit["pruned_at_epoch"] is None:
        results = trainer.test(module, datamodule=datamodule, ckpt_path=ckpt_path)
        metrics = to_floats(results[0]) if results else {}
        # Per-class precision/recall (multi-label: AP, AUROC, F1) of the test run (every rank
        # computes: the metrics sync).
        per_class = module.per_class_results("test", trainer.callback_metrics)
    mosaic = cfg.get("prediction_mosaic", True) and "val" in getattr(datamodule, "splits", {})
    if trainer.is_global_zero and mosaic:
        output = Path(cfg.paths.output_dir) / "predictions_val.png"
        write_split_mosaic(module, datamodule, "val", output)
    return {"test": metrics, "per_class_test": per_class}


def run_summary(cfg: DictConfig, fit: dict, tested: dict, trainer, started: float) -> dict:
    """results.json: the fit's and the test's records, what ran and how long."""
    import torch

    return {
        "run_dir": str(Path(cfg.paths.output_dir)),
        **{k: fit[k] for k in ("best_ckpt", "best_val_acc")},
        "optimized_metric": cfg.optimized_metric,
        **{k: fit[k] for k in ("objective", "pruned_at_epoch", "val")},
        "val_of": fit.get("val_of", "last_epoch"),  # a requeued job's record may predate it
        "val_last": fit.get("val_last", fit["val"]),
        **tested,
        "calibration": fit["calibration"],
        "wall_time_s": round(time.time() - started, 2),
        "precision": str(trainer.precision),  # what ran (trainer.precision=auto resolved)
        "torch_threads": torch.get_num_threads(),  # a parallel launcher's share of the cores
        "overrides": list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else [],
    }


def write_results(cfg: DictConfig, summary: dict) -> None:
    """The run folder's config_resolved.yaml and results.json (atomic), and the log's summary."""
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output_dir / "config_resolved.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    atomic_write_text(output_dir / "results.json", json.dumps(summary, indent=2) + "\n")
    log.info("Run directory: %s", output_dir)
    log.info("Best checkpoint: %s", summary["best_ckpt"] or "(none)")
    which = (
        f"validation and test of the best checkpoint, {summary['best_ckpt']}"
        if summary["val_of"] == "best_ckpt"
        else "validation of the last epoch; test of the model tested"
    )
    log.info("Final metrics: %s (%s)", json.dumps({**summary["val"], **summary["test"]}), which)
    if summary["val_last"] != summary["val"]:
        log.info("Last epoch's validation metrics: %s", json.dumps(summary["val_last"]))


def _continue_next_to(ckpt_path: str | None, trainer, module) -> None:
    """A resumed run checks the checkpoint fits the module (naming differing keys/shapes before
    the fit starts) and keeps writing next to it, so its best/last bookkeeping carries on
    instead of starting over in a new folder."""
    if not ckpt_path:
        return
    from lightning_cls.training.resume import check_compatible

    check_compatible(ckpt_path, module)
    for checkpoint in trainer.checkpoint_callbacks:
        checkpoint.dirpath = str(Path(ckpt_path).parent)


def task_options(cfg: DictConfig) -> dict:
    """``cfg.task`` as the module's ``task`` mapping, with the deprecated top-level keys
    (``label_smoothing``, ``mixup.*``, ``loss.*``) folded in where set, with a warning."""
    from lightning_cls.training.tasks.base import task_config, warn_flat

    flat = {"label_smoothing": cfg.get("label_smoothing")}
    for group in ("mixup", "loss"):  # gone from train.yaml; a user's config file may set them
        options = cfg.get(group)
        flat.update(OmegaConf.to_container(options, resolve=True) if options else {})
    flat = {k: v for k, v in flat.items() if v is not None}
    warn_flat(flat, "Config keys", FutureWarning)
    return task_config(OmegaConf.to_container(cfg.task, resolve=True), flat)


def per_device_batch_size(batch_size: int, world_size: int) -> int:
    """``data.batch_size`` is global: the share of each of ``world_size`` processes."""
    if batch_size % world_size:
        raise ValueError(
            f"data.batch_size={batch_size} is the global batch and does not split evenly over "
            f"{world_size} processes (trainer.devices x trainer.num_nodes); set data.batch_size "
            f"to a multiple of {world_size}, e.g. {max(1, round(batch_size / world_size)) * world_size}."
        )
    return batch_size // world_size


def _resume_from(cfg: DictConfig) -> str | None:
    """The checkpoint this run continues: ``ckpt_path`` as given (``last``: the newest single
    run of this experiment), else this run folder's own last.ckpt (a requeued job)."""
    from lightning_cls.training.resume import LAST, resolve_ckpt_path  # torch: only when training

    ckpt_path = cfg.get("ckpt_path")
    if ckpt_path is None:
        own = Path(cfg.paths.ckpt_dir) / "last.ckpt"
        if cfg.get("auto_resume") and own.is_file():
            log.info("This run folder holds %s (a restarted job): resuming from it.", own)
            return str(own)
        return None
    if (
        str(ckpt_path) == LAST
        and HydraConfig.initialized()
        and HydraConfig.get().mode == RunMode.MULTIRUN
    ):
        raise ValueError(
            "ckpt_path=last in a sweep (-m) would make every job resume the same newest run, "
            "another trial's; give each job its own ckpt_path=<file>, or rely on auto_resume "
            "(a requeued job continues from its own run folder's last.ckpt)."
        )
    return resolve_ckpt_path(ckpt_path, Path(cfg.paths.ckpt_root), pattern=cfg.paths.ckpt_last_glob)


def _best_record(trainer: pl.Trainer, metrics_key: str) -> tuple[float | None, dict]:
    """The best checkpoint's monitored score and its validation metrics, read from the file:
    ``BestMetric``'s state under ``metrics_key`` holds the metrics of the epoch it was saved
    at. A spawned DDP fit (``trainer=ddp_sim``) hands the main process only the best
    checkpoint's path, so its score comes from the file's ModelCheckpoint state too."""
    callback = trainer.checkpoint_callback
    score = getattr(callback, "best_model_score", None)
    metrics: dict = {}
    if callback is not None and Path(callback.best_model_path or "").is_file():
        import torch

        # mmap: the weights are not read, only the callbacks' small state
        state = torch.load(
            callback.best_model_path, map_location="cpu", weights_only=False, mmap=True
        )
        saved = state.get("callbacks", {})
        if score is None:
            score = saved.get(callback.state_key, {}).get("best_model_score")
        metrics = dict((saved.get(metrics_key) or {}).get("metrics") or {})
    return (float(score) if score is not None else None), metrics


register_resolvers()  # ${run_stamp:...} in conf/hydra/train.yaml


@hydra.main(config_path=config_dir(), config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    summary = train(cfg)
    # For sweepers (hydra/sweeper=optuna): the best value of cfg.optimized_metric in this run.
    return summary["objective"]


if __name__ == "__main__":
    from lightning_cls.training.cluster import latch_signals

    latch_signals()  # a requeue signal before train() is held for it, not the process's death
    run_cli(main)
