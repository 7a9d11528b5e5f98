"""A task is an object: a third task registered from outside, with an option of its own, trains
end to end without an edit to module.py, and checkpoints written before tasks were objects (or
held their options) still load and predict the same."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from helpers import LEARNABLE, make_data, make_module, make_trainer
from lightning_cls.data.base import data_fields
from lightning_cls.inference import InputSpec, Predictor
from lightning_cls.inference.tasks import TASKS, MultiClass, create_task
from lightning_cls.module import ClassificationModule
from lightning_cls.training.tasks import TRAINING_TASKS, TrainingTask, register_task


class Rejecting(MultiClass):
    """Toy decision: the most probable class, or no label when it is below the threshold."""

    name = "toy_reject"

    def __init__(self, threshold: float | None = None, **trust):
        super().__init__(**trust)
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
    """Toy learning half: the focal loss (its own option ``gamma``; 0: cross-entropy), and the
    accuracy over the images it does not reject."""

    decision_class = Rejecting

    def __init__(self, num_classes: int, gamma: float = 0.0, **others):
        super().__init__(num_classes, **others)
        self.gamma = gamma
        self.counts = {"val": [0, 0], "test": [0, 0]}  # (right, answered)

    def loss(self, logits, target):
        log_p = F.log_softmax(logits, 1).gather(1, target[:, None])[:, 0]  # (B,)
        return (-((1 - log_p.exp()) ** self.gamma) * log_p).mean()

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
    return make_module(data, module_kwargs=kwargs, widths=[8, 16], hidden=32)


def _fit_test_reload(module, data, tmp_path) -> tuple[dict, ClassificationModule]:
    """Train 4 epochs, test, and load the saved checkpoint back: (test metrics, loaded)."""
    trainer = make_trainer(tmp_path, max_epochs=4)
    trainer.fit(module, datamodule=data)
    (metrics,) = trainer.test(module, datamodule=data, verbose=False)
    ckpt = tmp_path / "trained.ckpt"
    trainer.save_checkpoint(ckpt)
    return metrics, ClassificationModule.load_from_checkpoint(ckpt, map_location="cpu")


def test_a_registered_task_trains_end_to_end_without_touching_the_module(tmp_path):
    assert "toy_reject" in TRAINING_TASKS and TASKS.get("toy_reject") is Rejecting
    torch.manual_seed(0)
    data = make_data(LEARNABLE)
    module = _module(data, task={"name": "toy_reject", "threshold": 0.4, "gamma": 1.0})
    logits, y = torch.randn(8, 4), torch.arange(8) % 4
    assert module.task.loss(logits, y) < F.cross_entropy(logits, y)  # gamma is used
    metrics, loaded = _fit_test_reload(module, data, tmp_path)
    assert metrics["test/answered_acc"] > 0.6, metrics  # chance: 0.25
    assert isinstance(loaded.task, RejectingTraining) and loaded.decision.threshold == 0.4
    assert loaded.task.gamma == 1.0  # its own option travels in the checkpoint's task
    assert loaded.hparams["task"] == {"name": "toy_reject", "gamma": 1.0, "threshold": 0.4}
    spec = InputSpec.from_hparams(loaded.hparams)
    assert isinstance(spec.decision, Rejecting) and spec.decision.threshold == 0.4
    # predict and serve ask the task: at most one label, none under the threshold
    probs = Predictor(loaded.net.eval(), spec).predict_images(data.splits["test"].images[:32])
    labels, values = spec.decision.decide(probs, 5)
    assert all(len(row) <= 1 for row in labels)
    assert [bool(row) for row in labels] == (probs.max(1).values >= 0.4).tolist()


def test_a_task_refuses_options_it_has_no_use_for():
    data = make_data(LEARNABLE)
    with pytest.raises(ValueError, match=r"label_smoothing=0.1: no meaning for task=toy_reject"):
        _module(data, task={"name": "toy_reject", "label_smoothing": 0.1})
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'gamma'"):
        _module(data, task="toy_reject", gamma=1.0)  # flat: the module takes none
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
        **data_fields(data.spec),
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
    assert (ml.task.name, ml.decision.threshold) == ("multilabel", 0.35)
    assert ml.hparams.task == {"name": "multilabel", "pos_weight": [2.0] * 4, "threshold": 0.35}
    assert ml.task.criterion.pos_weight.tolist() == [2.0] * 4
    spec = InputSpec.from_hparams(torch.load(tmp_path / "multilabel.ckpt")["hyper_parameters"])
    assert spec.decision.threshold == 0.35 and spec.decision.multi_hot


def test_the_threshold_has_one_owner_and_hparams_show_it():
    data = make_data(LEARNABLE)
    module = _module(data, task="multilabel")
    assert module.hparams.task["threshold"] == 0.5  # the default until a validation chooses one
    probs = torch.tensor([[0.9, 0.35, 0.1, 0.1], [0.3, 0.8, 0.1, 0.1]])
    targets = torch.tensor([[1, 1, 0, 0], [0, 1, 0, 0]])
    logged = module.task.epoch_end("val", {"probs": probs, "targets": targets})
    assert logged["val/threshold"] == module.hparams.task["threshold"] == module.decision.threshold
    assert module.decision.threshold == 0.35  # chosen on val
    module.task.epoch_end("test", {"probs": probs, "targets": targets})
    assert module.decision.threshold == 0.35  # test never chooses
    assert create_task("multilabel", 0.35).decide(probs, 1)[0] == [[0, 1], [1]]  # k: no cut


FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("name", ["multiclass", "multilabel"])
def test_checkpoints_written_by_the_flat_layout_load_and_predict_the_same(name, tmp_path):
    """``fixtures/old_*.ckpt``: written by the code whose module took every task option flat
    (``label_smoothing``, ``mixup_alpha``, ``class_weights``; ``threshold``, ``pos_weight``),
    with a calibration (temperature, a rejection rule) written flat beside them; and the
    probabilities that code gave for ``old_expected.pt``'s images."""
    expected = torch.load(FIXTURES / "old_expected.pt", weights_only=True)
    path = FIXTURES / f"old_{name}.ckpt"
    module = ClassificationModule.load_from_checkpoint(path, map_location="cpu").eval()
    spec = InputSpec.from_hparams(module.hparams)
    with torch.no_grad():
        probs = module.decision.probabilities(module(spec.preprocess(expected["images"])))
    torch.testing.assert_close(probs, expected[name])
    assert (
        module.decision.temperature == spec.decision.temperature != 1.0
    )  # calibrated, both halves
    options = module.hparams.task
    if name == "multiclass":  # the flat options moved into the task's mapping
        assert (options["label_smoothing"], options["mixup_alpha"]) == (0.1, 0.2)
        assert module.task.mixer is not None and module.decision.reject["score"] == "msp"
    else:
        assert (options["threshold"], options["pos_weight"]) == (0.35, [2.0] * 4)
    assert not {"label_smoothing", "threshold", "temperature"} & set(module.hparams)
    # Calibrating it again writes the new layout: the task's mapping, no flat options left.
    from lightning_cls.training.calibration import update_checkpoint

    new = update_checkpoint(path, tmp_path / "new.ckpt", {"temperature": 2.0})
    hparams = torch.load(new, weights_only=True)["hyper_parameters"]
    assert hparams["task"]["name"] == name and hparams["task"]["temperature"] == 2.0
    assert "label_smoothing" not in hparams and "pos_weight" not in hparams
    reloaded = ClassificationModule.load_from_checkpoint(new, map_location="cpu")
    assert (
        reloaded.decision.temperature == 2.0 == InputSpec.from_hparams(hparams).decision.temperature
    )


def test_the_older_config_keys_still_set_the_task_with_a_warning():
    from omegaconf import OmegaConf

    from lightning_cls.train import task_options

    cfg = OmegaConf.create(
        {
            "task": {"name": "multiclass", "metric": "val/acc", "label_smoothing": 0.0},
            "label_smoothing": 0.1,
            "mixup": {"mixup_alpha": 0.2, "cutmix_alpha": None, "mix_prob": None},
            "loss": {"class_weights": None, "class_weight_method": None, "pos_weight": None},
        }
    )
    with pytest.warns(FutureWarning, match=r"label_smoothing, mixup_alpha: deprecated.*task\."):
        task = task_options(cfg)
    assert task == {"name": "multiclass", "label_smoothing": 0.1, "mixup_alpha": 0.2}


def test_logit_norm_takes_the_cross_entropy_of_the_normalised_logits():
    """LogitNorm (``task.logit_norm=tau``): the loss of ``logits / (tau * ||logits||)``, so a
    larger logit norm cannot lower it, as it does the plain cross-entropy's."""
    torch.manual_seed(0)
    logits, y = torch.randn(8, 4), torch.arange(8) % 4
    normed = TRAINING_TASKS.create("multiclass", num_classes=4, logit_norm=0.5)
    expected = F.cross_entropy(logits / logits.norm(dim=1, keepdim=True) / 0.5, y)
    assert normed.loss(logits, y).item() == pytest.approx(expected.item(), rel=1e-5)
    assert normed.loss(10 * logits, y).item() == pytest.approx(normed.loss(logits, y).item())
    plain = TRAINING_TASKS.create("multiclass", num_classes=4)
    right = F.one_hot(y, 4) * 3.0  # confident and right: scaling up lowers the plain loss
    assert plain.loss(10 * right, y) < plain.loss(right, y)
    assert normed.loss(10 * right, y).item() == pytest.approx(normed.loss(right, y).item())


@pytest.mark.parametrize("value", [-0.1, "0.04", True, 11.0])
def test_a_logit_norm_that_is_not_a_temperature_is_refused(value):
    with pytest.raises(ValueError, match=r"task.logit_norm=.* is not a LogitNorm temperature; set"):
        TRAINING_TASKS.create("multiclass", num_classes=4, logit_norm=value)


def test_a_logit_norm_model_trains_and_keeps_its_option_in_the_checkpoint(tmp_path):
    torch.manual_seed(0)
    data = make_data(LEARNABLE)
    metrics, loaded = _fit_test_reload(
        _module(data, task={"name": "multiclass", "logit_norm": 0.1}), data, tmp_path
    )
    assert metrics["test/acc"] > 0.6, metrics  # chance: 0.25
    assert loaded.task.logit_norm == 0.1
