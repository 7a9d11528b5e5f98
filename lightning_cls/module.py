"""``ClassificationModule``: a network, its loss, metrics and optimizer in one LightningModule."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytorch_lightning as pl
import torch
from torch import nn
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from lightning_cls.inference.network import build_network, class_names
from lightning_cls.inference.predictor import probabilities
from lightning_cls.inference.predictor import tta as test_time_augment
from lightning_cls.inference.scores import best_threshold, multilabel_report, per_label_report
from lightning_cls.inference.spec import DEFAULT_THRESHOLD, TASKS
from lightning_cls.models import fill_input_options
from lightning_cls.training.class_balance import (
    WeightedCrossEntropy,
    per_class_metrics,
    resolve_class_weights,
)
from lightning_cls.training.mixup import BatchMixer
from lightning_cls.training.multilabel import EpochOutputs, MultiLabelLoss, resolve_pos_weight
from lightning_cls.training.optim import apply_group_scales

STAGES = ("train", "val", "test")


class ClassificationModule(pl.LightningModule):
    """Wraps an image classifier with cross-entropy, top-1/top-5 accuracy and optimizers.

    The network is built from the registry (``model_name`` + ``model_kwargs``) so that the
    checkpoint's hyperparameters are plain containers and ``load_from_checkpoint`` rebuilds it
    without Hydra. Pass ``net`` to wrap any other ``nn.Module`` (then pass it again on load).

    ``classes``, ``mean``, ``std``, ``image_size`` and ``num_channels`` describe the input the
    network expects; they travel in the checkpoint so predict/export need nothing else.
    ``optimizer`` and ``scheduler`` are partials: ``optimizer(params)`` and
    ``scheduler(optimizer, total_steps=...)`` (see ``lightning_cls.training.optim``).
    ``mixup_alpha``/``cutmix_alpha`` > 0 mix training batches (``lightning_cls.training.mixup``) with
    probability ``mix_prob``. ``classes``/``num_classes`` (attributes) and ``test_confusion``
    (a ``MulticlassConfusionMatrix`` over the last test run) are read by callbacks.

    ``task="multilabel"``: one sigmoid per class on multi-hot targets, binary cross-entropy
    (``pos_weight``: per label, or ``"auto"`` from the train counts), and mAP, AUROC and F1
    instead of accuracy. The decision threshold (``hparams.threshold``, what predict and the
    server use) is ``threshold``, or with ``threshold=None`` the one maximizing micro-F1 on
    each validation's predictions, saved with that epoch's checkpoint.
    """

    def __init__(
        self,
        model_name: str | None = None,
        model_kwargs: dict[str, Any] | None = None,
        net: nn.Module | None = None,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., Any] | None = None,
        label_smoothing: float = 0.0,
        classes: Sequence[str] | None = None,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        image_size: int | None = None,
        num_channels: int | None = None,
        tta_flip: bool = False,
        tta_translate: int = 0,
        resize_size: int | None = None,  # photos: shorter side resized to this, centre-cropped
        mixup_alpha: float = 0.0,
        cutmix_alpha: float = 0.0,
        mix_prob: float = 1.0,
        param_groups: Callable[[nn.Module], list[dict]] | None = None,
        class_weights: str | Sequence[float] | None = None,  # "auto": from the train counts
        class_weight_method: str = "inverse",  # or "effective" (training/class_balance.py)
        task: str = "multiclass",  # or "multilabel"
        threshold: float | None = None,  # multilabel: None = chosen on val (max micro-F1)
        pos_weight: str | Sequence[float] | None = None,  # multilabel BCE; "auto": train counts
    ):
        super().__init__()
        if task not in TASKS:
            raise ValueError(f"task={task!r} is not known; use task=multiclass or task=multilabel.")
        self.multilabel = task == "multilabel"
        if self.multilabel:
            _check_multilabel_options(
                label_smoothing, class_weights, mixup_alpha or cutmix_alpha, threshold
            )
        elif pos_weight is not None or threshold is not None:
            raise ValueError(
                "loss.pos_weight and task.threshold apply to multi-label models; set "
                "task=multilabel (a multi-label dataset) or leave them null."
            )
        if not isinstance(label_smoothing, (int, float)) or not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(
                f"label_smoothing={label_smoothing!r} is not a probability; set label_smoothing "
                "to a number from 0.0 (off) to 1.0, e.g. label_smoothing=0.1."
            )
        self.save_hyperparameters(ignore=["net", "optimizer", "scheduler", "param_groups"])
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
        self.net = net
        # The one place the number of classes is derived (metrics, mixup and plots read it).
        self.classes = class_names(classes, (model_kwargs or {}).get("num_classes"))
        self.num_classes = len(self.classes)
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        # net -> torch param-group dicts, optionally with lr_scale/weight_decay_scale
        # (lightning_cls.training.optim.apply_group_scales); e.g. optim.norm_bias_groups.
        self.param_groups = param_groups
        # val/test loss as sample-weighted sums synced over DDP ranks: exact with uneven shards.
        # (Lightning's sync_dist mean averages its integer sample count over ranks with
        # truncation under gloo, e.g. 359 samples on 2 ranks count as 358.)
        self.eval_losses = nn.ModuleDict({stage: MeanMetric() for stage in ("val", "test")})
        if self.multilabel:
            self.choose_threshold = threshold is None
            self.hparams.threshold = DEFAULT_THRESHOLD if threshold is None else float(threshold)
            weights = None if pos_weight == "auto" else pos_weight  # "auto": in setup()
            self.criterion = MultiLabelLoss(resolve_pos_weight(weights, None, self.num_classes))
            # Each val/test epoch's sigmoid outputs and targets (gathered over ranks).
            self.outputs = nn.ModuleDict(
                {stage: EpochOutputs(self.num_classes) for stage in ("val", "test")}
            )
            self.mixer = None
            return
        self.criterion = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
        if class_weights is not None and class_weights != "auto":  # "auto": in setup()
            self._weigh_loss(resolve_class_weights(class_weights, None, self.num_classes))
        self.metrics = nn.ModuleDict(
            {f"{stage}_metrics": _accuracy_metrics(self.num_classes, stage) for stage in STAGES}
        )
        # Predictions per (true, predicted) class of the last val and test epochs: per-class
        # precision/recall in results.json (train, eval split=val|test); TrainingPlots draws
        # the test one.
        self.val_confusion = MulticlassConfusionMatrix(self.num_classes)
        self.test_confusion = MulticlassConfusionMatrix(self.num_classes)
        self.mixer = None
        if mixup_alpha or cutmix_alpha:
            self.mixer = BatchMixer(self.num_classes, mixup_alpha, cutmix_alpha, mix_prob)

    def setup(self, stage: str) -> None:
        """Checks that the DataModule's task is this module's, then ``class_weights="auto"`` /
        ``pos_weight="auto"``: weights from the DataModule's train split, kept in the
        hyperparameters (the checkpoint records the weights it was trained with)."""
        datamodule = getattr(self.trainer, "datamodule", None)
        task = self.hparams.get("task", "multiclass")
        data_task = getattr(datamodule, "task", "multiclass")
        if datamodule is not None and data_task != task:
            name = getattr(datamodule, "name", type(datamodule).__name__)
            raise ValueError(
                f"task={task} but the data ({name}) is {data_task}: "
                + (
                    "it has one label per image; for several labels per image use "
                    "data=multilabel (a CSV/JSON index of file,label1;label2)."
                    if task == "multilabel"
                    else "it has several labels per image; set task=multilabel."
                )
            )
        key = "pos_weight" if self.multilabel else "class_weights"
        if self.hparams.get(key) != "auto":
            return
        splits = getattr(datamodule, "splits", {})
        labels = splits["train"].labels if "train" in splits else None
        if self.multilabel:
            weights = resolve_pos_weight("auto", labels, self.num_classes)
            self.hparams.pos_weight = weights
            self.criterion = MultiLabelLoss(weights)
            return
        weights = resolve_class_weights(
            "auto", labels, self.num_classes, self.hparams.get("class_weight_method", "inverse")
        )
        self.hparams.class_weights = weights
        self._weigh_loss(weights)

    def _weigh_loss(self, weights: list[float]) -> None:
        self.criterion = WeightedCrossEntropy(weights, self.hparams.label_smoothing)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, classes) logits
        return self.net(x)

    def _shared_step(self, batch, stage: str) -> torch.Tensor:
        x, y = batch
        logits = self._logits(x, tta=stage != "train")
        loss = self.criterion(logits, y)
        if self.multilabel:
            if stage != "train":
                self.outputs[stage].update(probabilities(logits.detach(), True), y)
        else:
            metrics = self.metrics[f"{stage}_metrics"]
            metrics.update(logits.detach(), y if y.ndim == 1 else y.argmax(1))
            if stage != "train":
                getattr(self, f"{stage}_confusion").update(logits.detach(), y)
        training = stage == "train"
        if training:  # sync_dist: the epoch's train/loss averages all ranks (equal, padded shards)
            self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True, sync_dist=True)
        else:  # train accuracy is logged once per epoch: per-step log_dict costs ~10%
            self.eval_losses[stage].update(loss.detach(), weight=x.shape[0])
            self.log(
                f"{stage}/loss",
                self.eval_losses[stage],
                on_step=False,
                on_epoch=True,
                prog_bar=True,
            )
            if not self.multilabel:
                self.log_dict(metrics, on_step=False, on_epoch=True, prog_bar=True)
        return loss

    def on_train_epoch_end(self) -> None:
        if self.multilabel:
            return
        metrics = self.metrics["train_metrics"]
        self.log_dict(metrics.compute())
        metrics.reset()

    def on_validation_epoch_start(self) -> None:
        self._reset_epoch_state("val")

    def on_test_epoch_start(self) -> None:
        self._reset_epoch_state("test")

    def _reset_epoch_state(self, stage: str) -> None:
        if self.multilabel:
            self.outputs[stage].reset()
        else:
            getattr(self, f"{stage}_confusion").reset()

    def on_validation_epoch_end(self) -> None:
        self._end_eval_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._end_eval_epoch("test")

    def _end_eval_epoch(self, stage: str) -> None:
        tensors = self._epoch_tensors(stage)  # computed (and synced over ranks) once
        if self.multilabel and tensors:
            self._log_multilabel(stage, tensors["probs"], tensors["targets"])
        # What per_class_results reads, as tensors in callback_metrics: Lightning hands those
        # back from spawned processes (trainer=ddp_sim), where this module's own metric states
        # stay behind. Non-scalar, so no logger or results.json picks them up.
        if self._trainer is not None:
            for key, value in tensors.items():
                self.trainer.callback_metrics[f"{stage}/_{key}"] = value.cpu()

    def _epoch_tensors(self, stage: str) -> dict[str, torch.Tensor]:
        if self.multilabel:
            probs, targets = self.outputs[stage].compute()  # every rank: the gathered epoch
            return {"probs": probs, "targets": targets} if len(probs) else {}
        return {"confusion": getattr(self, f"{stage}_confusion").compute()}

    def _log_multilabel(self, stage: str, probs: torch.Tensor, targets: torch.Tensor) -> None:
        """mAP, AUROC and F1 of the epoch's gathered (N, K) outputs; on val, first choose the
        threshold (auto mode)."""
        if stage == "val" and self.choose_threshold:
            self.hparams.threshold = best_threshold(probs, targets)
        threshold = self.hparams.threshold
        report = multilabel_report(probs, targets, threshold)
        self.log(f"{stage}/map", report.pop("map"), prog_bar=True)
        logged = {f"{stage}/{k}": v for k, v in report.items()}
        self.log_dict({**logged, f"{stage}/threshold": threshold})

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """A multi-label checkpoint's threshold is the one chosen with its weights: ``test``
        on the best checkpoint uses its own, not the last validation's (unless the user fixed
        one: ``threshold`` given)."""
        saved = (checkpoint.get("hyper_parameters") or {}).get("threshold")
        if self.multilabel and self.choose_threshold and saved is not None:
            self.hparams.threshold = float(saved)  # a threshold the user fixed stays fixed

    def per_class_results(self, stage: str, metrics: Mapping | None = None) -> dict[str, dict]:
        """Per class of the last ``stage`` ("val"/"test") epoch: precision, recall and support
        (multi-class) or average precision, AUROC, F1 and positives (multi-label). Pass the
        trainer's ``callback_metrics``: they hold the epoch's tensors also after a spawned DDP
        run (``trainer=ddp_sim``), whose processes counted in their own copies of this module."""
        metrics = metrics if metrics is not None else {}
        names = ("probs", "targets") if self.multilabel else ("confusion",)
        keys = [f"{stage}/_{name}" for name in names]
        if all(k in metrics for k in keys):
            tensors = dict(zip(names, (metrics[k] for k in keys)))
        else:
            tensors = self._epoch_tensors(stage)
        if self.multilabel:
            if not tensors:
                return {}
            threshold = self.hparams.threshold
            return per_label_report(
                tensors["probs"], tensors["targets"], threshold, list(self.classes)
            )
        return per_class_metrics(tensors["confusion"].cpu(), self.classes)

    def _logits(self, x: torch.Tensor, tta: bool) -> torch.Tensor:
        if not tta:
            return self(x)  # (B, classes)
        # Flip / translate TTA (airbench), the same function as the exported Predictor's.
        return test_time_augment(
            self, x, self.hparams.tta_flip, self.hparams.get("tta_translate", 0)
        )

    def training_step(self, batch, batch_idx):
        if self.mixer is not None:
            batch = self.mixer(*batch)  # soft (B, K) targets
        return self._shared_step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._shared_step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._shared_step(batch, "test")

    def predict_step(self, batch, batch_idx):
        x = batch[0] if isinstance(batch, (list, tuple)) else batch
        return probabilities(self._logits(x, tta=True), self.multilabel)

    def configure_optimizers(self):
        factory = self.optimizer_factory or (lambda p: torch.optim.Adam(p, lr=1e-3))
        params = self.param_groups(self.net) if self.param_groups else self.parameters()
        optimizer = apply_group_scales(factory(params))
        if self.scheduler_factory is None:
            return optimizer
        total = int(self.trainer.estimated_stepping_batches)
        scheduler = self.scheduler_factory(optimizer, total_steps=total)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


def _check_multilabel_options(label_smoothing, class_weights, mixing, threshold) -> None:
    """The multi-class options with no multi-label meaning are one-line errors."""
    if label_smoothing:
        raise ValueError(
            f"label_smoothing={label_smoothing} applies to multi-class softmax targets; with "
            "task=multilabel set label_smoothing=0."
        )
    if class_weights is not None:
        raise ValueError(
            "loss.class_weights weighs classes of a softmax; with task=multilabel use "
            "loss.pos_weight (auto, or one weight per label) and loss.class_weights=null."
        )
    if mixing:
        raise ValueError(
            "MixUp/CutMix (mixup.mixup_alpha/cutmix_alpha) mix one-hot targets; with "
            "task=multilabel set them to 0."
        )
    if threshold is not None and (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, float))
        or not 0 < threshold < 1
    ):
        raise ValueError(
            f"task.threshold={threshold!r} is not a probability; set a number strictly between "
            "0 and 1, or auto to choose it on the validation split."
        )


def _accuracy_metrics(num_classes: int, stage: str) -> MetricCollection:
    metrics = {"acc": MulticlassAccuracy(num_classes, top_k=1, average="micro")}
    if num_classes > 5:
        metrics["acc_top5"] = MulticlassAccuracy(num_classes, top_k=5, average="micro")
    return MetricCollection(metrics, prefix=f"{stage}/")
