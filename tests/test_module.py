"""ClassificationModule: shared step, flip TTA, schedulers."""

import pytest
import torch
from torch import nn

from lightning_cls.inference.spec import InputSpec
from lightning_cls.inference.tta import TTA
from lightning_cls.module import ClassificationModule


def spec(classes, channels=1):
    """An input spec with ``classes`` (what the module takes instead of loose fields)."""
    return InputSpec(list(classes), (0.5,) * channels, (0.25,) * channels, 4, channels)


class LeftHalf(nn.Module):
    """Class 0 if the left half of the image is brighter, else class 1: flip-sensitive."""

    def forward(self, x):
        left, right = (
            x[..., : x.shape[-1] // 2].mean((1, 2, 3)),
            x[..., x.shape[-1] // 2 :].mean((1, 2, 3)),
        )
        return torch.stack([left - right, right - left], dim=1) * 10


def test_flip_tta_averages_the_mirror_image_logits():
    x = torch.zeros(2, 1, 4, 4)
    x[0, ..., :2] = 1.0  # bright left half
    plain = ClassificationModule(net=LeftHalf(), spec=spec(["left", "right"]))
    tta = ClassificationModule(net=LeftHalf(), spec=spec(["left", "right"]), tta=TTA(flip=True))
    assert plain._logits(x, tta=True)[0, 0] > 0  # no TTA configured: the plain logits
    torch.testing.assert_close(tta._logits(x, tta=True), torch.zeros(2, 2))  # mirror cancels
    torch.testing.assert_close(tta._logits(x, tta=False), plain(x))  # training never uses TTA


class TopLeft(nn.Module):
    """Logits (top-left pixel, its negative): show which shifted copies TTA averages."""

    def forward(self, x):
        return torch.cat([x[:, :, 0, 0], -x[:, :, 0, 0]], dim=1)


def test_translate_tta_averages_copies_shifted_by_p_pixels_with_reflected_edges():
    x = torch.arange(16.0).view(1, 1, 4, 4)  # x[0, 0, i, j] = 4 i + j
    module = ClassificationModule(net=TopLeft(), spec=spec("ab"), tta=TTA(translate=1))
    # Half the unshifted logit, a quarter each of the copies shifted up-left and down-right:
    # with reflect padding both copies start at pixel (1, 1).
    torch.testing.assert_close(module._logits(x, tta=True)[:, 0], torch.tensor([0.5 * 0 + 0.5 * 5]))
    both = ClassificationModule(net=TopLeft(), spec=spec("ab"), tta={"flip": True, "translate": 2})
    mirror = x.flip(-1)  # flip TTA inside each copy: (x[0, 0] + x[0, 3]) / 2 = 1.5 unshifted
    shifted = (x[..., 2, 2] + mirror[..., 2, 2]) / 2  # p=2: both copies start at (2, 2)
    torch.testing.assert_close(both._logits(x, tta=True)[:, 0], (1.5 + shifted[:, 0]) / 2)
    with pytest.raises(ValueError, match=r"tta.translate=-1 is not a pixel shift; use an int >= 0"):
        ClassificationModule(net=TopLeft(), spec=spec("ab"), tta=TTA(translate=-1))


def test_module_needs_a_network():
    with pytest.raises(ValueError, match="needs model_name .* or net"):
        ClassificationModule()
    with pytest.raises(
        ValueError, match=r"cannot tell the number of classes: pass spec=datamodule"
    ):
        ClassificationModule(net=nn.Identity())


def test_the_number_of_classes_is_derived_once_from_names_or_a_count():
    named = ClassificationModule(net=nn.Identity(), spec=spec(["cat", "dog", "emu"]))
    assert named.classes == ["cat", "dog", "emu"] and named.num_classes == 3
    counted = ClassificationModule(net=nn.Identity(), model_kwargs={"num_classes": 2})
    assert counted.classes == ["0", "1"] and counted.num_classes == 2
    assert counted.test_confusion.num_classes == 2
    with pytest.raises(
        ValueError, match=r"num_classes=4 but 3 classes are named .*set model.num_classes=3"
    ):
        ClassificationModule(net=nn.Identity(), spec=spec("abc"), model_kwargs={"num_classes": 4})


def test_ranks_spawned_with_one_module_count_into_their_own_metric_states():
    """``ddp_spawn`` (trainer=ddp_sim) hands the module to each rank through torch's
    multiprocessing pickler, which moves every tensor into shared memory, metric states too:
    two ranks then counted into one MeanMetric, and a rank's ``+=`` that lost the race dropped
    a count (a loaded two-process test of 359 images reported their loss sum / 358).
    ``setup``, which every rank runs before its first step, gives each its own states."""
    from multiprocessing.reduction import ForkingPickler

    import pytorch_lightning as pl
    import torch.multiprocessing  # registers the tensor-sharing reductions with the pickler

    def spawned(module):  # what each rank unpickles (one process here: the same storage)
        return ForkingPickler.loads(ForkingPickler.dumps(module))

    module = ClassificationModule(net=LeftHalf(), spec=spec(["left", "right"]))
    ranks = [spawned(module), spawned(module)]
    losses = [rank.eval_losses["test"] for rank in ranks]
    assert all(loss.weight.is_shared() for loss in losses)  # the cause: one shared storage
    losses[0].update(torch.tensor(1.0))
    assert losses[1].weight.item() == 1.0  # negative control: rank 1 sees rank 0's count
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    for rank in ranks:
        rank.trainer = trainer
        rank.setup("test")
    for loss, count in zip(losses, (180, 179)):  # 359 images over two ranks
        for _ in range(count):
            loss.update(torch.tensor(0.5), weight=1)
    assert [loss.weight.item() for loss in losses] == [180.0, 179.0]
    states = [v for rank in ranks for m in rank.modules() if hasattr(m, "metric_state")
              for v in m.metric_state.values() if isinstance(v, torch.Tensor)]  # fmt: skip
    assert states and not any(state.is_shared() for state in states)
