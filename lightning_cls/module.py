"""``ClassificationModule``: a network, its loss, metrics and optimizer in one LightningModule."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import Any

import pytorch_lightning as pl
import torch
from torch import nn
from torchmetrics import CatMetric, MeanMetric, Metric, MetricCollection

from lightning_cls.inference.network import build_network, class_names
from lightning_cls.inference.rules.msp import MSP
from lightning_cls.inference.spec import REQUIRED_KEYS, InputSpec
from lightning_cls.inference.tasks import Task
from lightning_cls.inference.tta import LEGACY_KEYS, TTA, selective_tta, warn_legacy
from lightning_cls.models import fill_input_options
from lightning_cls.training.distill import Distiller
from lightning_cls.training.ood_training.base import build_ood_training, ood_training_config
from lightning_cls.training.optim import apply_group_scales
from lightning_cls.training.selective_tta import choose_threshold
from lightning_cls.training.tasks import TrainingTask, checkpoint_task, create_training_task
from lightning_cls.training.tasks.base import FLAT_OPTIONS, task_config, warn_flat

# The input fields a spec gives the module, saved flat in its hyperparameters as every reader
# of checkpoints (InputSpec.from_hparams, model_weights.json, resume's data check) takes them.
INPUT_FIELDS = ("classes", "mean", "std", "image_size", "num_channels", "resize_size")
INPUT_FIELDS += ("data_fingerprint",)


class EpochMean:
    """The mean over an epoch that ``self.log(name, value, on_epoch=True, sync_dist=True)``
    computes, bit for bit: ``value * batch_size`` summed in float32 on the value's device, over
    the summed batch sizes, both reduced with ``reduce_op="mean"`` over ranks (Lightning's
    ``_ResultMetric``, its integer-count truncation under gloo included). Kept here, it costs
    two tensor additions per step instead of a ``self.log`` call. Like Lightning's accumulator
    it is not in checkpoints: after a mid-epoch resume it covers the batches since."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.total: torch.Tensor | None = None
        self.count: torch.Tensor | None = None

    def update(self, value: torch.Tensor, batch_size: int) -> None:
        value = value.detach()
        if value.dtype not in (torch.float32, torch.float64):
            value = value.to(torch.get_default_dtype())
        if self.total is None or self.total.device != value.device:
            self.total = torch.tensor(0.0, dtype=torch.get_default_dtype(), device=value.device)
            self.count = torch.tensor(0, device=value.device)
        self.total = self.total + value * batch_size
        self.count = self.count + batch_size

    def compute(self, reduce: Callable[..., torch.Tensor]) -> torch.Tensor:
        """``reduce``: the strategy's (``trainer.strategy.reduce``)."""
        return reduce(self.total.clone(), reduce_op="mean") / reduce(self.count, reduce_op="mean")


class ClassificationModule(pl.LightningModule):
    """Wraps an image classifier with cross-entropy, top-1/top-5 accuracy and optimizers.

    The network is built from the registry (``model_name`` + ``model_kwargs``) so that the
    checkpoint's hyperparameters are plain containers and ``load_from_checkpoint`` rebuilds it
    without Hydra. Pass ``net`` to wrap any other ``nn.Module`` (then pass it again on load).

    ``spec`` (an ``InputSpec`` or its dict, e.g. ``datamodule.spec``) describes the input the
    network expects (classes, mean/std, image size, channels, resize, data fingerprint); its
    fields travel in the checkpoint so predict/export need nothing else.
    ``optimizer`` and ``scheduler`` are partials: ``optimizer(params)`` and
    ``scheduler(optimizer, total_steps=...)`` (see ``lightning_cls.training.optim``).
    ``classes``/``num_classes`` (attributes) and ``test_confusion`` (a
    ``MulticlassConfusionMatrix`` over the last test run) are read by callbacks.

    ``task`` (a name, or the mapping of a name and every option of that task:
    ``conf/task/<name>.yaml``, e.g. ``{"name": "multiclass", "label_smoothing": 0.1}``;
    ``lightning_cls.training.tasks``) owns the loss, the metrics, logits -> probabilities, the
    decision rule and what calibration chose; this module asks it and never branches on it,
    and lists none of its options. What the task chose while learning (a multi-label
    threshold, ``"auto"`` weights) appears in ``hparams["task"]`` and so in every checkpoint.
    Older checkpoints' flat options (``label_smoothing``) still load, deprecated
    (``load_from_checkpoint``). ``distill`` (a ``Distiller``) adds a teacher's soft targets to the training
    loss; the teacher is not part of the module or its checkpoints. ``ood_training``
    (``{"name": "rotation", "weight": 0.5}``; ``training/ood_training/``) adds an auxiliary
    loss for near-OOD detection; its head is a submodule, saved in checkpoints, not exported.

    ``tta`` (a ``TTA``, ``inference/tta.py``; ``conf/tta/``) is the evaluation's test-time
    augmentation. ``TTA(mode="selective")``: its flip/translate only for images whose plain
    confidence is below ``tta.threshold``, chosen at each validation epoch's end (validation
    itself runs the full TTA to choose it: the least share of images whose accuracy is within
    ``tta.tolerance`` of full TTA's; ``training/selective_tta.py``). The threshold is a
    hyperparameter, so checkpoints and every exported spec carry it; ``test/tta_share``
    (and ``val/tta_share``) log the share of images that got the TTA.
    """

    def __init__(
        self,
        model_name: str | None = None,
        model_kwargs: dict[str, Any] | None = None,
        net: nn.Module | None = None,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., Any] | None = None,
        param_groups: Callable[[nn.Module], list[dict]] | None = None,
        task: str | Mapping[str, Any] = "multiclass",  # a name, or {name, its options}
        distill: Distiller | None = None,  # a teacher's soft targets (training/distill.py)
        spec: InputSpec | Mapping[str, Any] | None = None,  # the input (datamodule.spec)
        tta: TTA | Mapping[str, Any] | None = None,  # test-time augmentation (None: none)
        ood_training: Mapping[str, Any] | None = None,  # {name, options}: training/ood_training
    ):
        super().__init__()
        tta = TTA.from_value(tta)
        task = task_config(task)
        self.save_hyperparameters(
            ignore=["net", "optimizer", "scheduler", "param_groups", "distill", "spec", "tta"]
        )
        self.hparams["task"] = task
        self.hparams["tta"] = tta.to_dict()  # plain containers: weights_only checkpoints
        self.hparams["ood_training"] = ood_training_config(ood_training)
        classes = image_size = num_channels = None
        if spec is not None:  # its input fields, flat, as every reader of checkpoints takes them
            if not isinstance(spec, InputSpec):
                spec = InputSpec.from_dict(spec, "ClassificationModule(spec=...)")
            saved = {key: getattr(spec, key) for key in INPUT_FIELDS}
            saved.update(classes=list(spec.classes), mean=list(spec.mean), std=list(spec.std))
            self.hparams.update(saved)
            classes, image_size = self.hparams.classes, spec.image_size
            num_channels = spec.num_channels
        if net is None:
            if model_name is None:
                raise ValueError("ClassificationModule needs model_name (a registry name) or net.")
            # Null input options (data=streaming's image size, imagefolder's class count) take
            # the data's values; saved filled, so whatever rebuilds the net from these
            # hyperparameters (checkpoint runtimes, the export callback) gets the same net.
            spec = {"classes": classes, "num_channels": num_channels, "image_size": image_size}
            model_kwargs = fill_input_options(model_kwargs or {}, spec)
            self.hparams["model_kwargs"] = model_kwargs
            net = build_network(model_name, model_kwargs, classes)
        elif classes is None and not (model_kwargs or {}).get("num_classes"):
            raise ValueError(
                "ClassificationModule(net=...) cannot tell the number of classes: pass "
                "spec=datamodule.spec (an InputSpec naming the classes), e.g. "
                "spec=InputSpec(classes=[...], mean=..., std=..., image_size=..., num_channels=...)."
            )
        self.net = net
        # An auxiliary loss for unknowns (ood_training=rotation): a submodule, so any head is
        # saved and resumed with the module; never exported (the exported network is self.net).
        self.ood_training = build_ood_training(self.hparams["ood_training"], net)
        # The one place the number of classes is derived (metrics, mixup and plots read it).
        self.classes = class_names(classes, (model_kwargs or {}).get("num_classes"))
        self.num_classes = len(self.classes)
        self.task: TrainingTask = create_training_task(task, self.num_classes)
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        # net -> torch param-group dicts, optionally with lr_scale/weight_decay_scale
        # (lightning_cls.training.optim.apply_group_scales); e.g. optim.norm_bias_groups.
        self.param_groups = param_groups
        # val/test loss as sample-weighted sums synced over DDP ranks: exact with uneven shards.
        # (Lightning's sync_dist mean averages its integer sample count over ranks with
        # truncation under gloo, e.g. 359 samples on 2 ranks count as 358.)
        self.eval_losses = nn.ModuleDict({stage: MeanMetric() for stage in ("val", "test")})
        self.distiller = distill  # a plain object: the teacher is no submodule (not saved)
        # Selective TTA: each validation image's confidence and plain/full-TTA hits (synced
        # over ranks), and the share of images that got the TTA per stage.
        if tta.mode == "selective":
            keys = ("confidence", "plain", "full")
            self.tta_records = nn.ModuleDict({k: CatMetric() for k in keys})
        self.tta_share = nn.ModuleDict({stage: MeanMetric() for stage in ("val", "test")})
        self.train_loss = EpochMean()  # train/loss_epoch, without a self.log per step

    @property
    def hparams(self):
        """The saved options, the task's as it stands (``TrainingTask.config``: what it chose
        while learning, a multi-label threshold, ``"auto"`` weights, and what calibration
        chose): what checkpoints and every artifact's spec carry."""
        hparams = super().hparams
        task = self.__dict__.get("_modules", {}).get("task")  # absent until __init__ made it
        if task is not None:
            hparams["task"] = task.config()
        return hparams

    @property
    def tta(self) -> TTA:
        """The evaluation's test-time augmentation (``hparams["tta"]``, its threshold as
        selective TTA chose it)."""
        return TTA.from_value(self.hparams["tta"])

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path, map_location=None, hparams_file=None,
                             strict=None, weights_only=None, **kwargs):  # fmt: skip
        """Lightning's ``load_from_checkpoint``, given the constructor arguments that the
        checkpoint's hyperparameters hold in another shape (``init_arguments``): the input
        fields are saved flat (every checkpoint reader takes them so) and become ``spec``; an
        older checkpoint's flat TTA keys (``tta_flip``, ...) and task options
        (``label_smoothing``, ...) become ``tta`` and ``task``. Lightning passes only the
        constructor's parameters through, so this is the one place those layouts are read
        (``kwargs`` still win)."""
        saved = saved_hparams(checkpoint_path)
        kwargs = {**init_arguments(saved), **kwargs}
        return super().load_from_checkpoint(
            checkpoint_path, map_location, hparams_file, strict, weights_only, **kwargs
        )

    @property
    def decision(self) -> Task:
        """The task's decision half: probabilities, predicted labels, threshold (the mosaic
        and predict_step ask it)."""
        return self.task.decision

    @property
    def test_confusion(self):
        """The last test epoch's confusion matrix, for a task that keeps one (TrainingPlots)."""
        confusion = getattr(self.task, "confusion", None)
        if confusion is None:
            raise AttributeError(f"task={self.task.name} keeps no confusion matrix")
        return confusion["test"]

    def setup(self, stage: str) -> None:
        """Checks that the DataModule's labels are this task's, then lets the task compute
        what it needs from the train split (``class_weights``/``pos_weight="auto"``, kept in
        the hyperparameters: the checkpoint records the weights it was trained with). First,
        every metric state starts over in this process (``reset_metric_states``)."""
        self.reset_metric_states()
        self.train_loss.reset()
        if self.ood_training is not None:
            self.ood_training.reset()
        if stage == "fit" and self.distiller is not None:  # loads and checks the teacher
            self.distiller.prepare(InputSpec.from_hparams(self.hparams))
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is None:
            return
        name = getattr(datamodule, "name", type(datamodule).__name__)
        self.task.check_data(getattr(datamodule, "task", "multiclass"), name)
        splits = getattr(datamodule, "splits", {})
        self.task.setup(splits["train"].labels if "train" in splits else None)

    def reset_metric_states(self) -> None:
        """Every torchmetrics state (losses, accuracies, confusion, TTA records) starts from its
        default, in this process's own memory. ``ddp_spawn`` (``trainer=ddp_sim``) sends the
        module to its ranks through torch.multiprocessing, which moves every tensor into shared
        memory: the ranks then counted into the same states, each ``+=`` a read-modify-write
        that a rank could overwrite with a stale read (a two-rank test loss of 359 images once
        came out as their sum / 358 on a loaded machine). Called by ``setup``, which Lightning
        runs in each rank before any step."""
        in_collection = set()
        for module in self.modules():
            if isinstance(module, MetricCollection):
                module.reset()  # keeps its compute groups' shared references consistent
                in_collection.update(id(m) for m in module.values())
        for module in self.modules():
            if isinstance(module, Metric) and id(module) not in in_collection:
                module.reset()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, classes) logits
        return self.net(x)

    def _shared_step(self, batch, stage: str) -> torch.Tensor:
        x, y = batch
        logits = self._logits(x, tta=stage != "train", y=y, stage=stage)
        loss = self.task.loss(logits, y)
        self.task.update(stage, logits.detach(), y)
        if stage == "train" and self.distiller is not None:  # the teacher sees this (mixed) x
            loss, soft = self.distiller.blend(self.task, x, logits, loss)
            self.log("train/distill_loss", soft, on_step=False, on_epoch=True, sync_dist=True)
        if stage == "train" and self.ood_training is not None:  # logged per epoch
            loss = loss + self.ood_training.loss(self.net, x, y)
        if stage == "train":  # logged in on_train_batch_end / on_train_epoch_end
            self.train_loss.update(loss, x.shape[0])
            self._step_loss = loss.detach()
            return loss
        self.eval_losses[stage].update(loss.detach(), weight=x.shape[0])
        self.log(
            f"{stage}/loss", self.eval_losses[stage], on_step=False, on_epoch=True, prog_bar=True
        )
        metrics = self.task.step_metrics(stage)
        if metrics:
            self.log_dict(metrics, on_step=False, on_epoch=True, prog_bar=True)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        """``train/loss_step`` on the steps the loggers write (``trainer.log_every_n_steps``;
        also the step a callback stops at, and every step of ``fast_dev_run``), synced over
        ranks as before: a ``self.log`` per step cost 4.2 ms of a 65 ms SimpleCNN step at batch
        64 under cProfile (docs/benchmarks.md, benchmarks/step_overhead.py). The progress bar's step loss follows
        the same rhythm."""
        trainer = self.trainer
        every = trainer.log_every_n_steps
        now = every and trainer.global_step % every == 0  # after this batch's optimizer step
        if now or trainer.should_stop or trainer.fast_dev_run:
            self.log(
                "train/loss_step", self._step_loss, on_step=True, on_epoch=False,
                prog_bar=True, sync_dist=True, batch_size=len(batch[0]),
            )  # fmt: skip

    def on_train_epoch_end(self) -> None:
        # Reset here and in setup, not in on_train_epoch_start: overriding that hook changed
        # the default run's data order (its CSV's losses moved; not found why).
        if self.train_loss.count is not None:  # the epoch's mean loss over every rank's images
            loss = self.train_loss.compute(self.trainer.strategy.reduce)
            self.log("train/loss_epoch", loss, prog_bar=True)
        self.train_loss.reset()
        if self.ood_training is not None:  # e.g. train/rotation_loss, train/rotation_acc
            for key, value in self.ood_training.epoch_metrics(self.trainer.strategy.reduce).items():
                self.log(f"train/{key}", value)
            self.ood_training.reset()
        self._log_epoch(self.task.epoch_end("train", {}))

    def on_validation_epoch_start(self) -> None:
        self.task.reset("val")

    def on_test_epoch_start(self) -> None:
        self.task.reset("test")

    def on_validation_epoch_end(self) -> None:
        self._end_eval_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._end_eval_epoch("test")

    def _end_eval_epoch(self, stage: str) -> None:
        if stage == "val" and self.tta.mode == "selective":
            self._choose_tta_threshold()
        tensors = self.task.epoch_tensors(stage)  # computed (and synced over ranks) once
        self._log_epoch(self.task.epoch_end(stage, tensors))
        # What per_class_results reads, as tensors in callback_metrics: Lightning hands those
        # back from spawned processes (trainer=ddp_sim), where this module's own metric states
        # stay behind. Non-scalar, so no logger or results.json picks them up.
        if self._trainer is not None:
            for key, value in tensors.items():
                self.trainer.callback_metrics[f"{stage}/_{key}"] = value.cpu()

    def _log_epoch(self, metrics: Mapping[str, Any]) -> None:
        if metrics:  # the first one (acc, map) in the progress bar
            first, *rest = metrics
            self.log(first, metrics[first], prog_bar=True)
            self.log_dict({k: metrics[k] for k in rest})

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """The task takes back the decision the checkpoint carries: the threshold chosen with
        these weights (``test`` on the best checkpoint uses the best epoch's) and what
        calibration chose (``training/calibration.py``). Either layout of hyperparameters."""
        saved = checkpoint.get("hyper_parameters") or {}
        self.task.restore(checkpoint_task(saved))
        threshold = saved_tta(saved).threshold
        if threshold is not None:  # selective TTA's, chosen with these weights
            self.hparams["tta"] = self.tta.with_threshold(threshold).to_dict()

    def per_class_results(self, stage: str, metrics: Mapping | None = None) -> dict[str, dict]:
        """Per class of the last ``stage`` ("val"/"test") epoch, as the task reports it:
        precision, recall and support (multi-class) or average precision, AUROC, F1 and
        positives (multi-label). Pass the trainer's ``callback_metrics``: they hold the epoch's
        tensors also after a spawned DDP run (``trainer=ddp_sim``), whose processes counted in
        their own copies of this module."""
        metrics = metrics if metrics is not None else {}
        prefix = f"{stage}/_"
        tensors = {k[len(prefix) :]: v for k, v in metrics.items() if k.startswith(prefix)}
        if not tensors:
            tensors = self.task.epoch_tensors(stage)
        return self.task.per_class(stage, tensors, list(self.classes), metrics)

    def _logits(self, x: torch.Tensor, tta: bool, y=None, stage: str | None = None):
        options = self.tta
        flip, translate = options.flip, options.translate
        if not tta or not options.active:
            return self(x)  # (B, classes)
        # Flip / translate TTA (airbench), the same functions as the exported Predictor's.
        confidence = lambda logits: self.decision.confidence(logits, MSP)  # noqa: E731
        if stage == "val" and options.mode == "selective":
            plain = self(x)  # (B, classes): recorded with the full TTA's, to choose by
            full, _ = selective_tta(self, x, flip, translate, math.inf, confidence, plain)
            records = (confidence(plain), self._hits(plain, y), self._hits(full, y))
            for metric, value in zip(self.tta_records.values(), records):
                metric.update(value.float())
            return full
        threshold = options.threshold
        if threshold is None:
            return options.logits(self, x)
        logits, low = selective_tta(self, x, flip, translate, threshold, confidence)
        if stage in self.tta_share:
            self.tta_share[stage].update(low.float())
            self.log(f"{stage}/tta_share", self.tta_share[stage], on_step=False, on_epoch=True)
        return logits

    def _hits(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """(B,) bool: whether each image's decided label is its label (all of a row's)."""
        pred = self.decision.predicted(self.decision.probabilities(logits))
        same = pred == (y.bool() if pred.dtype == torch.bool else y)
        return same.reshape(len(y), -1).all(1)

    def _choose_tta_threshold(self) -> None:
        """tta=selective: the threshold of this validation epoch's records (with these
        weights), into the hyperparameters that checkpoints and specs carry."""
        records = self.tta_records
        if records["confidence"].update_count == 0:
            return
        conf, plain, full = (records[k].compute().flatten() for k in records)
        for metric in records.values():
            metric.reset()
        tta = self.tta
        threshold, share, accuracy = choose_threshold(
            conf, plain.bool(), full.bool(), tta.tolerance
        )
        self.hparams["tta"] = tta.with_threshold(threshold).to_dict()
        self.log_dict(
            {
                "val/tta_threshold": threshold,
                "val/tta_share": share,
                "val/acc_tta_selective": accuracy,
            }
        )

    def training_step(self, batch, batch_idx):
        return self._shared_step(self.task.training_batch(batch), "train")

    def validation_step(self, batch, batch_idx):
        self._shared_step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._shared_step(batch, "test")

    def predict_step(self, batch, batch_idx):
        x = batch[0] if isinstance(batch, (list, tuple)) else batch
        return self.decision.probabilities(self._logits(x, tta=True, stage="predict"))

    def configure_optimizers(self):
        factory = self.optimizer_factory or (lambda p: torch.optim.Adam(p, lr=1e-3))
        params = self.param_groups(self.net) if self.param_groups else self.parameters()
        head = list(self.ood_training.parameters()) if self.ood_training is not None else []
        if self.param_groups and head:  # ood_training's own head, at the base lr
            params = [*params, {"params": head}]
        optimizer = apply_group_scales(factory(params))
        if self.scheduler_factory is None:
            return optimizer
        total = int(self.trainer.estimated_stepping_batches)
        scheduler = self.scheduler_factory(optimizer, total_steps=total)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


def saved_tta(hparams: Mapping[str, Any]) -> TTA:
    """A checkpoint's TTA, in either layout (``tta`` as a TTA's dict, or the older mode string
    beside flat ``tta_flip``/``tta_translate``/``tta_threshold``/``tta_tolerance``)."""
    legacy = {k: hparams[k] for k in LEGACY_KEYS if k in hparams}
    return TTA.from_value(hparams.get("tta"), legacy)


def init_arguments(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The constructor arguments a checkpoint's hyperparameters hold in another shape: ``spec``
    (from the flat input fields), ``tta`` and ``task`` (older checkpoints' flat keys folded
    in, with a deprecation warning where one is set to other than its default)."""
    out: dict[str, Any] = {"tta": saved_tta(hparams)}
    default = TTA().to_dict()
    legacy = {
        k: hparams[k] for k, f in LEGACY_KEYS.items() if hparams.get(k, default[f]) != default[f]
    }
    if isinstance(hparams.get("tta"), str) and hparams["tta"] != "full":
        legacy["tta"] = hparams["tta"]
    warn_legacy(legacy, "The checkpoint's hyperparameters")
    flat = {k: hparams[k] for k in FLAT_OPTIONS if k in hparams}
    set_flat = {k: v for k, v in flat.items() if v != FLAT_OPTIONS[k]}
    warn_flat(set_flat, "The checkpoint's hyperparameters", DeprecationWarning)
    out["task"] = task_config(hparams.get("task"), flat)
    if all(hparams.get(key) is not None for key in REQUIRED_KEYS):
        out["spec"] = {key: hparams.get(key) for key in INPUT_FIELDS}
    return out


def saved_hparams(checkpoint_path) -> dict[str, Any]:
    """A checkpoint's ``hyper_parameters`` (a path or a file object, left where it was)."""
    if hasattr(checkpoint_path, "read"):  # a file object: read, then rewound for Lightning
        where = checkpoint_path.tell()
        checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
        checkpoint_path.seek(where)
    elif os.path.isfile(checkpoint_path):  # mapped, not read: the weights stay on disk
        checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True, mmap=True)
    else:  # a remote path (s3://...)
        from lightning_fabric.utilities.cloud_io import get_filesystem

        with get_filesystem(checkpoint_path).open(checkpoint_path, "rb") as f:
            checkpoint = torch.load(f, map_location="cpu", weights_only=True)
    return dict(checkpoint.get("hyper_parameters") or {})
