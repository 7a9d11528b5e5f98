"""Knowledge distillation (lightning_cls/training/distill.py): the student learns the teacher's
function from its soft targets, with a checkpoint or an ONNX teacher, MixUp, EMA, multi-label."""

from __future__ import annotations

import copy
import functools

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.callbacks import EMAWeightAveraging

from helpers.tiny import LEARNABLE, fit, make_data, make_module, make_trainer
from lightning_cls.data import SyntheticDataModule
from lightning_cls.export.exporter import ExportConfig, export_model
from lightning_cls.inference import InputSpec
from lightning_cls.inference.runtimes import open_runtime
from lightning_cls.inference.spec import Split, normalize
from lightning_cls.module import ClassificationModule
from lightning_cls.training.distill import Distiller, sigmoid_distill_loss, softmax_distill_loss

EPOCHS = 3
FAST = functools.partial(torch.optim.Adam, lr=1e-2)
ROOT = None  # nothing is written: no logger, no checkpoint


class ShuffledLabels(SyntheticDataModule):
    """LEARNABLE data whose train labels are permuted: nothing to learn from the labels."""

    def load_splits(self):
        splits = super().load_splits()
        train = splits["train"]
        order = torch.randperm(len(train.labels), generator=torch.Generator().manual_seed(1))
        splits["train"] = Split(train.images, train.labels[order])
        return splits


class EpochLosses(pl.Callback):
    def __init__(self):
        self.losses = []

    def on_train_epoch_end(self, trainer, pl_module):
        self.losses.append(float(trainer.callback_metrics["train/distill_loss"]))


def _student(distill: Distiller | None, seed: int = 0, callbacks=(), **module_kwargs):
    """A [4, 8] SimpleCNN fit EPOCHS epochs on shuffled labels; returns (module, data)."""
    torch.manual_seed(seed)
    data = ShuffledLabels(**LEARNABLE)
    module = make_module(data, optimizer=FAST, module_kwargs={"distill": distill, **module_kwargs})
    trainer = make_trainer(ROOT, callbacks, max_epochs=EPOCHS, limit_val_batches=0)
    trainer.fit(module, datamodule=data)
    return module.eval(), data


def _agreement(student, teacher, images: torch.Tensor) -> float:
    with torch.no_grad():
        return (student(images).argmax(1) == teacher(images).argmax(1)).float().mean().item()


@pytest.fixture(scope="module")
def students(trained):
    """Two students at the same seed and steps on shuffled labels: one taught by the trained
    SimpleCNN (alpha=1: soft targets only), one not."""
    losses = EpochLosses()
    taught = _student(Distiller(trained.ckpt, alpha=1.0, temperature=2.0), callbacks=[losses])
    alone = _student(None)
    return taught, alone, losses.losses


def test_alpha_one_learns_the_teachers_function_from_shuffled_labels(students, trained):
    (taught, data), (alone, _), losses = students
    images = normalize(data.splits["test"].images, data.mean, data.std)
    with_teacher = _agreement(taught, trained.net, images)
    without = _agreement(alone, trained.net, images)
    # Shuffled labels teach nothing (agreement near chance, 1/4); the teacher's targets do.
    assert with_teacher > 0.7 and with_teacher > without + 0.3, (with_teacher, without)
    assert losses[-1] < losses[0] * 0.8, losses


def test_two_processes_each_run_the_teacher_on_their_own_shard(trained, tmp_path):
    """DDP (two forked gloo processes, each loading the teacher in setup('fit') and running it
    on its own shard): the student still learns the teacher's function from shuffled labels."""
    torch.manual_seed(0)
    data = ShuffledLabels(**LEARNABLE)
    distill = Distiller(trained.ckpt, alpha=1.0, temperature=2.0)
    module = make_module(data, optimizer=FAST, module_kwargs={"distill": distill})
    # Each rank takes half of every epoch: twice the epochs give the one-process steps.
    trainer = make_trainer(tmp_path, max_epochs=2 * EPOCHS, limit_val_batches=0, devices=2,
                           strategy="ddp_fork")  # fmt: skip
    trainer.fit(module, datamodule=data)  # the fit's weights come back from rank 0
    data.setup()  # the forked ranks set up their own copies
    images = normalize(data.splits["test"].images, data.mean, data.std)
    assert _agreement(module.eval(), trained.net, images) > 0.7


def test_the_distilled_student_exports_to_onnx_like_any_model(students, tmp_path):
    (taught, data), _, _ = students
    spec = InputSpec.from_hparams(taught.hparams)
    path = export_model(taught.net, spec, tmp_path, ExportConfig(formats=["onnx"])).paths["onnx"]
    images = normalize(data.splits["test"].images[:8], data.mean, data.std)
    onnx = open_runtime(path)(images.numpy())
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(onnx), taught.net(images), atol=1e-4, rtol=1e-3)
    assert not any("teacher" in key for key in taught.state_dict())


@pytest.fixture(scope="module")
def teacher_onnx(trained, tmp_path_factory):
    out = tmp_path_factory.mktemp("teacher")
    return export_model(trained.net, trained.spec, out, ExportConfig(formats=["onnx"])).paths[
        "onnx"
    ]


def test_an_onnx_teacher_gives_the_checkpoints_targets(trained, teacher_onnx):
    from_ckpt, from_onnx = Distiller(trained.ckpt), Distiller(teacher_onnx)
    for distiller in (from_ckpt, from_onnx):
        distiller.prepare(trained.spec)
    x = torch.randn(5, 3, 16, 16)
    torch.testing.assert_close(
        from_onnx.teacher_logits(x), from_ckpt.teacher_logits(x), atol=1e-4, rtol=1e-3
    )


def test_mixup_and_ema_with_an_onnx_teacher(teacher_onnx):
    """The teacher sees the mixed batch the student sees; EMA's copy of the module carries no
    ONNX session; the checkpointed weights are the student's alone."""
    distiller = Distiller(teacher_onnx, alpha=0.5)
    seen = {"teacher": [], "student": [], "targets": []}
    spy = distiller.teacher_logits
    distiller.teacher_logits = lambda x: seen["teacher"].append(x.clone()) or spy(x)
    torch.manual_seed(0)
    data = make_data(LEARNABLE)
    module = make_module(
        data,
        module_kwargs={"distill": distiller, "task": {"name": "multiclass", "mixup_alpha": 0.4}},
    )
    module.net.register_forward_pre_hook(lambda m, args: seen["student"].append(args[0].clone()))
    loss = module.task.loss
    module.task.loss = lambda logits, y: seen["targets"].append(y) or loss(logits, y)
    ema = EMAWeightAveraging(decay=0.9)
    trainer = make_trainer(ROOT, [ema], limit_train_batches=2, limit_val_batches=0)
    trainer.fit(module, datamodule=data)
    assert all(y.ndim == 2 for y in seen["targets"])  # MixUp's soft targets: mixed batches
    assert len(seen["teacher"]) == 2
    for x_teacher, x_student in zip(seen["teacher"], seen["student"]):
        assert torch.equal(x_teacher, x_student)
    assert copy.deepcopy(module).distiller.ready is False  # the session stays behind
    assert module.distiller.ready


def test_mismatched_classes_name_both(trained):
    data = make_data(LEARNABLE, num_classes=3)
    module = make_module(data, module_kwargs={"distill": Distiller(trained.ckpt)})
    with pytest.raises(ValueError, match=r"predicts 4 classes \[class_0.*student learns 3 classes"):
        make_trainer(ROOT, limit_train_batches=1).fit(module, datamodule=data)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"alpha": 1.5}, r"distill.alpha=1.5 is not a weight from 0 to 1"),
        ({"temperature": 0}, r"distill.temperature=0 must be a number above 0"),
    ],
)
def test_bad_options_are_one_line_errors(trained, options, message):
    with pytest.raises(ValueError, match=message):
        Distiller(trained.ckpt, **options)


def test_a_missing_teacher_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"distill.teacher=.*nope.ckpt does not exist"):
        Distiller(tmp_path / "nope.ckpt")


def test_soft_losses_are_hintons():
    s, t = torch.randn(6, 4, requires_grad=True), torch.randn(6, 4)
    kl = softmax_distill_loss(s, t, 3.0)
    p = torch.softmax(t / 3, 1)
    manual = (p * (p.log() - torch.log_softmax(s / 3, 1))).sum(1).mean() * 9
    torch.testing.assert_close(kl, manual)
    bce = sigmoid_distill_loss(s, t, 3.0)
    q, r = torch.sigmoid(t / 3), torch.sigmoid(s / 3)
    manual = -(q * r.log() + (1 - q) * (1 - r).log()).mean() * 9
    torch.testing.assert_close(bce, manual)
    # Each is at its minimum where the student's logits are the teacher's.
    for loss in (softmax_distill_loss, sigmoid_distill_loss):
        same = t.clone().requires_grad_()
        (grad,) = torch.autograd.grad(loss(same, t, 3.0), [same])
        assert grad.abs().max() < 1e-6


class MultiHot(SyntheticDataModule):
    """LEARNABLE images with multi-hot rows (each image's class and the next one)."""

    task = "multilabel"

    def load_splits(self):
        splits = super().load_splits()
        hot = lambda y: (F.one_hot(y, 4) + F.one_hot((y + 1) % 4, 4)).to(torch.uint8)  # noqa: E731
        return {name: Split(s.images, hot(s.labels)) for name, s in splits.items()}


def test_multilabel_student_learns_the_teachers_sigmoids(tmp_path):
    """task=multilabel: alpha=1 (no label in the loss) and the student's sigmoid outputs move
    to the teacher's (BCE against its softened probabilities)."""
    torch.manual_seed(0)
    data = MultiHot(**LEARNABLE)
    teacher_ckpt = fit(
        make_module(data, module_kwargs={"task": "multilabel"}), data, tmp_path, max_epochs=2
    )
    teacher = ClassificationModule.load_from_checkpoint(teacher_ckpt, map_location="cpu").eval()
    distiller = Distiller(teacher_ckpt, alpha=1.0, temperature=2.0)
    student = make_module(
        data, optimizer=FAST, module_kwargs={"task": "multilabel", "distill": distiller}
    )
    images = normalize(data.splits["test"].images, data.mean, data.std)

    def gap() -> float:  # mean |p_student - p_teacher| over test images and labels
        with torch.no_grad():
            return (
                (torch.sigmoid(student(images)) - torch.sigmoid(teacher(images)))
                .abs()
                .mean()
                .item()
            )

    before = gap()
    make_trainer(ROOT, max_epochs=EPOCHS, limit_val_batches=0).fit(student.train(), datamodule=data)
    student.eval()
    assert gap() < before * 0.5, (before, gap())


def test_a_label_smoothed_teacher_is_warned_about_once(trained, tmp_path, caplog):
    from lightning_cls.inference import load_torch_model
    from lightning_cls.training.calibration import update_checkpoint

    smoothed = update_checkpoint(trained.ckpt, tmp_path / "smoothed.ckpt", {"label_smoothing": 0.2})
    _, student = load_torch_model(trained.ckpt)
    with caplog.at_level("WARNING", logger="lightning_cls.training.distill"):
        Distiller(trained.ckpt).prepare(student)  # trained without smoothing: no warning
        assert not caplog.records
        first = Distiller(smoothed)
        first.prepare(student)
        copy.deepcopy(first).prepare(student)  # a copy (EMA, a spawned rank) loads it again
    (record,) = caplog.records
    assert "was trained with label_smoothing=0.2" in record.getMessage()
    assert "label_smoothing=0" in record.getMessage()


def test_an_imagenet_normalised_teacher_sees_its_own_normalisation(trained, tmp_path):
    """The student normalises with mean 0.5, std 0.25 (the synthetic data's); the teacher
    checkpoint says ImageNet's mean/std. The teacher's logits for the student's batch must be
    the teacher's own logits on its own normalisation of the same uint8 images, and that
    differs from the teacher run on the student's batch as it is: the renormalisation
    matters here. (Mutation checked by hand: ``prepare`` leaving ``_renormalize`` None fails.)"""
    from lightning_cls.data.imagefolder import IMAGENET_MEAN, IMAGENET_STD
    from lightning_cls.training.calibration import update_checkpoint

    imagenet = {"mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD)}
    teacher = update_checkpoint(trained.ckpt, tmp_path / "imagenet.ckpt", imagenet)
    student = trained.spec
    assert (student.mean, student.std) == ((0.5,) * 3, (0.25,) * 3)
    images = torch.randint(0, 256, (6, 3, 16, 16), generator=torch.Generator().manual_seed(0))
    images = images.to(torch.uint8)  # (B, C, H, W)
    distiller = Distiller(teacher)
    distiller.prepare(student)
    got = distiller.teacher_logits(normalize(images, student.mean, student.std))
    with torch.no_grad():
        own = trained.net(normalize(images, IMAGENET_MEAN, IMAGENET_STD))
        unrenormalised = trained.net(normalize(images, student.mean, student.std))
    torch.testing.assert_close(got, own, atol=1e-4, rtol=1e-4)
    assert (unrenormalised - own).abs().max() > 0.1  # the test can tell the two apart
