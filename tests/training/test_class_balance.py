"""Class imbalance: loss weights from train counts, the balanced tensor sampler (also sharded
over DDP ranks), per-class precision/recall."""

import pytest
import torch

from helpers import make_data, make_module
from lightning_cls.data.tensor_loader import TensorBatchLoader
from lightning_cls.training.class_balance import (
    WeightedCrossEntropy,
    class_counts,
    class_weights,
    per_class_metrics,
    resolve_class_weights,
)


def test_inverse_and_effective_weights():
    counts = torch.tensor([90, 10])
    assert class_weights(counts, "inverse") == pytest.approx([0.2, 1.8])  # 1/90 : 1/10, mean 1
    eff = class_weights(counts, "effective", beta=0.99)
    raw = [(1 - 0.99) / (1 - 0.99**n) for n in (90, 10)]
    assert eff == pytest.approx([2 * r / sum(raw) for r in raw])
    assert eff[1] / eff[0] < 9  # effective number weighs the rare class less than 1/n
    assert class_weights(torch.tensor([5, 5, 5])) == pytest.approx([1.0, 1.0, 1.0])


def test_resolve_and_bad_settings():
    labels = torch.tensor([0, 0, 0, 1])
    assert resolve_class_weights("auto", labels, 2) == pytest.approx([0.5, 1.5])  # 1/3 : 1
    assert resolve_class_weights(None, labels, 2) is None
    with pytest.raises(ValueError, match="task.class_weights='balanced'; use auto, null"):
        resolve_class_weights("balanced", labels, 2)
    with pytest.raises(ValueError, match="task.class_weights has 3 values for 2 classes"):
        resolve_class_weights([1, 2, 3], labels, 2)
    with pytest.raises(ValueError, match="Unknown task.class_weight_method='sqrt'"):
        class_weights(class_counts(labels, 2), "sqrt")


def test_weighted_loss_matches_torch_and_stays_out_of_the_state_dict():
    logits, y = torch.randn(8, 3), torch.tensor([0, 1, 2, 0, 0, 1, 2, 2])
    loss = WeightedCrossEntropy([0.5, 1.0, 2.0])
    expected = torch.nn.functional.cross_entropy(logits, y, torch.tensor([0.5, 1.0, 2.0]))
    torch.testing.assert_close(loss(logits, y), expected)
    module = make_module(
        make_data(num_classes=3),
        module_kwargs={"task": {"name": "multiclass", "class_weights": [0.5, 1.0, 2.0]}},
    )
    assert isinstance(module.task.criterion, WeightedCrossEntropy)
    assert not any("criterion" in k for k in module.state_dict())


def test_balanced_sampler_draws_classes_equally_and_shards_over_ranks():
    labels = torch.tensor([0] * 90 + [1] * 10)
    images = torch.arange(100, dtype=torch.uint8).view(100, 1, 1, 1)
    loader = TensorBatchLoader(images, labels, 10, shuffle=True, seed=0, train=True, balanced=True)
    drawn = torch.cat([y for epoch in range(20) for _, y in loader])
    share = drawn.double().mean().item()  # fraction of class 1
    assert abs(share - 0.5) < 4 * (0.25 / len(drawn)) ** 0.5
    # Two DDP ranks take interleaved halves of the same global balanced order.
    ranks = [
        TensorBatchLoader(
            images, labels, 10, True, seed=0, train=True, balanced=True, rank=r, world_size=2
        )  # fmt: skip
        for r in range(2)
    ]
    a, b = (r.indices(3) for r in ranks)
    whole = loader.indices(3)
    assert torch.equal(a, whole[0::2]) and torch.equal(b, whole[1::2])


def test_per_class_precision_and_recall():
    matrix = torch.tensor([[8, 2], [1, 9]])  # rows true, columns predicted
    out = per_class_metrics(matrix, ["cat", "dog"])
    assert out["cat"] == {"precision": pytest.approx(8 / 9), "recall": 0.8, "support": 10}
    assert out["dog"]["precision"] == pytest.approx(9 / 11, abs=1e-6)
    assert per_class_metrics(torch.zeros(1, 1), ["x"])["x"]["precision"] is None
