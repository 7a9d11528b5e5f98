"""A task is an object: a third task registered from outside trains end to end without an edit
to module.py, and checkpoints written before tasks were objects still load."""

from __future__ import annotations

import functools

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from helpers import LEARNABLE, make_data
from lightning_cls.inference import InputSpec, Predictor
from lightning_cls.inference.tasks import TASKS, MultiClass, create_task
from lightning_cls.module import ClassificationModule
from lightning_cls.training.tasks import TRAINING_TASKS, TrainingTask, register_task


class Rejecting(MultiClass):
    """Toy decision: the most probable class, or no label when it is below the threshold."""

    name = "toy_reject"

    def __init__(self, threshold: float | None = None):
        self.threshold = 0.3 if threshold is None else float(threshold)

    def decide(self, probs, k):
        top = probs.max(1)
        keep = (top.values >= self.threshold).tolist()
        return (
            [[i] if ok else [] for i, ok in zip(top.indices.tolist(), keep)],
            [[p] if ok else [] for p, ok in zip(top.values.tolist(), keep)],
        )


@register_task("toy_reject")
class RejectingTraining(TrainingTask):
    """Toy learning half: cross-entropy, and the accuracy over the images it does not reject."""

    decision_class = Rejecting

    def __init__(self, num_classes: int, threshold: float | None = None, **others):
        super().__init__(num_classes, threshold=threshold, **others)
        self.counts = {"val": [0, 0], "test": [0, 0]}  # (right, answered)

    def loss(self, logits, target):
        return F.cross_entropy(logits, target)

    def reset(self, stage):
        self.counts[stage] = [0, 0]

    def update(self, stage, logits, target):
        if stage == "train":
            return
        probs = self.decision.probabilities(logits)
        answered = probs.max(1).values >= self.decision.threshold
        self.counts[stage][0] += int(((probs.argmax(1) == target) & answered).sum())
        self.counts[stage][1] += int(answered.sum())

    def epoch_end(self, stage, tensors):
        if stage == "train":
            return {}
        right, answered = self.counts[stage]
        return {f"{stage}/answered_acc": right / max(1, answered)}


def _module(data, **kwargs) -> ClassificationModule:
    adam = functools.partial(torch.optim.Adam, lr=3e-3)
    kwargs = {"model_name": "simplecnn", "optimizer": adam, **data.spec, **kwargs}
    model_kwargs = dict(num_classes=4, in_channels=3, image_size=16, widths=[8, 16], hidden=32)
    return ClassificationModule(model_kwargs=model_kwargs, **kwargs)


def test_a_registered_task_trains_end_to_end_without_touching_the_module(tmp_path):
    assert "toy_reject" in TRAINING_TASKS and TASKS.get("toy_reject") is Rejecting
    torch.manual_seed(0)
    data = make_data(LEARNABLE)
    module = _module(data, task="toy_reject", threshold=0.4)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=4,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, datamodule=data)
    (metrics,) = trainer.test(module, datamodule=data, verbose=False)
    assert metrics["test/answered_acc"] > 0.6, metrics  # chance: 0.25
    ckpt = tmp_path / "toy.ckpt"
    trainer.save_checkpoint(ckpt)

    loaded = ClassificationModule.load_from_checkpoint(ckpt, map_location="cpu")
    assert isinstance(loaded.task, RejectingTraining) and loaded.decision.threshold == 0.4
    spec = InputSpec.from_hparams(loaded.hparams)
    assert isinstance(spec.decision, Rejecting) and spec.threshold == 0.4
    # predict and serve ask the task: at most one label, none under the threshold
    probs = Predictor(loaded.net.eval(), spec).predict_images(data.splits["test"].images[:32])
    labels, values = spec.decision.decide(probs, 5)
    assert all(len(row) <= 1 for row in labels)
    assert [bool(row) for row in labels] == (probs.max(1).values >= 0.4).tolist()


def test_a_task_refuses_options_it_has_no_use_for():
    data = make_data(LEARNABLE)
    with pytest.raises(ValueError, match=r"label_smoothing=0.1: no meaning for task=toy_reject"):
        _module(data, task="toy_reject", label_smoothing=0.1)
    with pytest.raises(TypeError, match=r"register a TrainingTask subclass"):
        register_task("not_a_task")(object)


def _old_checkpoint(path, data, **hparams) -> None:
    """A checkpoint as the code before task objects wrote it: the network's weights and the
    flat hyperparameters (``task``, ``threshold``, ``pos_weight`` ... or none of them)."""
    module = _module(data)
    saved = {
        "model_name": "simplecnn",
        "model_kwargs": dict(module.hparams.model_kwargs),
        "label_smoothing": 0.0,
        "tta_flip": False,
        "mixup_alpha": 0.0,
        "cutmix_alpha": 0.0,
        "mix_prob": 1.0,
        "class_weights": None,
        **data.spec,
        **hparams,
    }
    torch.save(
        {
            "state_dict": {f"net.{k}": v for k, v in module.net.state_dict().items()},
            "hyper_parameters": saved,
            "pytorch-lightning_version": pl.__version__,
        },
        path,
    )


def test_checkpoints_written_before_tasks_were_objects_still_load(tmp_path):
    data = make_data(LEARNABLE)
    # Only the network's weights are in the state dict: metrics and losses keep none, so the
    # layout is the one older checkpoints have.
    assert {k.split(".")[0] for k in _module(data).state_dict()} == {"net"}
    _old_checkpoint(tmp_path / "multiclass.ckpt", data)  # before multi-label: no task key
    old = ClassificationModule.load_from_checkpoint(tmp_path / "multiclass.ckpt")
    assert old.task.name == "multiclass" and old.decision.threshold is None
    _old_checkpoint(
        tmp_path / "multilabel.ckpt", data, task="multilabel", threshold=0.35, pos_weight=[2.0] * 4
    )
    ml = ClassificationModule.load_from_checkpoint(tmp_path / "multilabel.ckpt")
    assert (ml.task.name, ml.decision.threshold, ml.hparams.threshold) == ("multilabel", 0.35, 0.35)
    assert ml.task.criterion.pos_weight.tolist() == [2.0] * 4
    spec = InputSpec.from_hparams(torch.load(tmp_path / "multilabel.ckpt")["hyper_parameters"])
    assert spec.decision.threshold == 0.35 and spec.decision.multi_hot


def test_the_threshold_has_one_owner_and_hparams_show_it():
    data = make_data(LEARNABLE)
    module = _module(data, task="multilabel")
    assert module.hparams.threshold == 0.5  # the default until a validation chooses one
    probs = torch.tensor([[0.9, 0.35, 0.1, 0.1], [0.3, 0.8, 0.1, 0.1]])
    targets = torch.tensor([[1, 1, 0, 0], [0, 1, 0, 0]])
    logged = module.task.epoch_end("val", {"probs": probs, "targets": targets})
    assert logged["val/threshold"] == module.hparams.threshold == module.decision.threshold
    assert module.decision.threshold == 0.35  # chosen on val
    module.task.epoch_end("test", {"probs": probs, "targets": targets})
    assert module.decision.threshold == 0.35  # test never chooses
    assert create_task("multilabel", 0.35).decide(probs, 1)[0] == [[0, 1], [1]]  # k: no cut
