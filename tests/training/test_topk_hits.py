"""The multi-class task's train accuracy (TopKHits): torchmetrics' micro accuracies, in one pass."""

import pytest
import torch
from torchmetrics.classification import MulticlassAccuracy

from lightning_cls.training.tasks import create_training_task
from lightning_cls.training.tasks.multiclass import TopKHits


@pytest.mark.parametrize("num_classes", [3, 10])
def test_train_accuracy_equals_torchmetrics_micro_accuracy(num_classes):
    torch.manual_seed(0)
    ours = TopKHits(num_classes, prefix="train/")
    ks = (1, 5) if num_classes > 5 else (1,)
    reference = {k: MulticlassAccuracy(num_classes, top_k=k, average="micro") for k in ks}
    for batch in (64, 64, 17):  # uneven batches: counts, not a mean of batch means
        logits, target = torch.randn(batch, num_classes), torch.randint(0, num_classes, (batch,))
        logits[: batch // 2, 0] += 3.0  # some confident rows, some wrong
        ours.update(logits, target)
        for metric in reference.values():
            metric.update(logits, target)
    got = ours.compute()
    assert set(got) == ({"train/acc", "train/acc_top5"} if num_classes > 5 else {"train/acc"})
    assert got["train/acc"] == reference[1].compute()  # bit-equal: hits / images in float32
    if num_classes > 5:
        assert got["train/acc_top5"] == reference[5].compute()
        assert got["train/acc_top5"] > got["train/acc"]


def test_the_task_logs_train_accuracy_once_per_epoch_and_starts_over():
    task = create_training_task("multiclass", 10)
    assert task.step_metrics("train") == {}  # nothing synced or logged per step
    logits = torch.eye(10)[[0, 1, 2, 3]] * 5  # (4, 10): predicts 0, 1, 2, 3
    task.update("train", logits, torch.tensor([0, 1, 9, 9]))
    first = task.epoch_end("train", {})
    assert first["train/acc"] == pytest.approx(0.5)
    task.update("train", logits, torch.tensor([0, 1, 2, 3]))
    assert task.epoch_end("train", {})["train/acc"] == pytest.approx(1.0)  # reset in between
