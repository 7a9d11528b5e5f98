"""ood_training=outliers (lightning_cls/training/ood_training/outliers.py): the tiles are a
permutation of each image's own, never the original; the switch makes the network unsure on
tile-shuffled images while it still classifies; the outlier pass leaves BatchNorm's running
statistics alone; checkpoints are the plain network's; bad options are refused."""

from __future__ import annotations

import functools

import pytest
import torch
from omegaconf import OmegaConf

from helpers.hydra_configs import compose
from helpers.tiny import LEARNABLE, make_data, make_module, make_trainer
from lightning_cls.inference.spec import normalize
from lightning_cls.module import ClassificationModule
from lightning_cls.training.ood_training import build_ood_training
from lightning_cls.training.ood_training.outliers import TileOutliers, shuffle_tiles

OUTLIERS = {"name": "outliers", "weight": 0.5, "grid": 4, "share": 0.5}
FAST = functools.partial(torch.optim.Adam, lr=1e-2)


def _tiles(image: torch.Tensor, grid: int) -> list[torch.Tensor]:
    c, h, w = image.shape
    th, tw = h // grid, w // grid
    return [
        image[:, i * th : (i + 1) * th, j * tw : (j + 1) * tw]
        for i in range(grid)
        for j in range(grid)
    ]


def test_shuffle_tiles_permutes_each_images_own_tiles_and_never_keeps_the_order():
    torch.manual_seed(0)
    x = torch.randn(64, 3, 8, 8)
    out = shuffle_tiles(x, 2)  # 4 tiles: 1 in 24 random orders is the identity
    for image, shuffled in zip(x, out):
        before, after = _tiles(image, 2), _tiles(shuffled, 2)
        assert not torch.equal(image, shuffled)
        matched = [next(i for i, t in enumerate(before) if torch.equal(t, a)) for a in after]
        assert sorted(matched) == [0, 1, 2, 3]  # each tile once, all from this image
    last = shuffle_tiles(x.contiguous(memory_format=torch.channels_last), 2)
    assert last.is_contiguous(memory_format=torch.channels_last)


def _fit(ood_training) -> tuple[ClassificationModule, object]:
    torch.manual_seed(0)
    data = make_data(LEARNABLE)
    module = make_module(data, optimizer=FAST, module_kwargs={"ood_training": ood_training})
    trainer = make_trainer(None, max_epochs=4, limit_val_batches=0)
    trainer.fit(module, datamodule=data)
    return module.eval(), data


@pytest.fixture(scope="module")
def runs():
    return {"none": _fit(None), "outliers": _fit(OUTLIERS)}


def _confidence_and_accuracy(module, data) -> tuple[float, float, float]:
    test = data.splits["test"]
    x = normalize(test.images, data.mean, data.std)
    torch.manual_seed(1)
    with torch.no_grad():
        clean = module(x).softmax(1)
        shuffled = module(shuffle_tiles(x, 4)).softmax(1)
    accuracy = (clean.argmax(1) == test.labels).float().mean().item()
    return clean.amax(1).mean().item(), shuffled.amax(1).mean().item(), accuracy


def test_the_switch_makes_the_network_unsure_on_shuffled_images_and_it_still_classifies(runs):
    _, plain_shuffled, plain_accuracy = _confidence_and_accuracy(*runs["none"])
    clean, shuffled, accuracy = _confidence_and_accuracy(*runs["outliers"])
    assert accuracy > 0.6, accuracy  # chance: 0.25
    assert shuffled < plain_shuffled - 0.1, (shuffled, plain_shuffled)
    assert shuffled < clean - 0.2, (shuffled, clean)


def test_it_logs_its_epoch_means_and_adds_no_parameters(runs, tmp_path):
    module, data = runs["outliers"]
    assert list(module.ood_training.parameters()) == []
    assert set(module.state_dict()) == set(runs["none"][0].state_dict())
    trainer = make_trainer(None, max_epochs=1, limit_train_batches=2, limit_val_batches=0)
    trainer.fit(make_module(data, module_kwargs={"ood_training": OUTLIERS}), datamodule=data)
    loss, msp = (float(trainer.callback_metrics[f"train/outlier_{k}"]) for k in ("loss", "msp"))
    assert loss >= torch.log(torch.tensor(4.0)).item() - 1e-4  # its minimum: log C, C = 4
    assert 0.25 <= msp <= 1.0
    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)
    loaded = ClassificationModule.load_from_checkpoint(path, strict=True)
    assert isinstance(loaded.ood_training, TileOutliers)
    assert loaded.hparams["ood_training"] == OUTLIERS


def test_the_outlier_pass_keeps_batchnorm_running_statistics_and_trains_the_network():
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8, momentum=0.4),
        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 3),
    )  # fmt: skip
    outliers = TileOutliers(net, weight=1.0, grid=2, share=1.0)
    bn = net[1]
    mean, var = bn.running_mean.clone(), bn.running_var.clone()
    x = torch.randn(16, 3, 8, 8) * 3 + 1
    torch.manual_seed(2)
    loss = outliers.loss(net, x, torch.zeros(16, dtype=torch.long))
    torch.testing.assert_close(bn.running_mean, mean, rtol=0, atol=0)
    torch.testing.assert_close(bn.running_var, var, rtol=0, atol=0)
    assert bn.momentum == 0.4  # restored
    torch.manual_seed(2)  # the same tile orders
    logits = net(shuffle_tiles(x, 2))
    expected = torch.nn.functional.cross_entropy(logits, torch.full((16, 3), 1 / 3))
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    loss.backward()
    assert net[0].weight.grad.abs().sum() > 0


def test_share_sets_how_many_images_become_outliers():
    seen = []
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 2))
    net.register_forward_hook(lambda m, args, out: seen.append(len(args[0])))
    TileOutliers(net, share=0.25).loss(net, torch.randn(16, 3, 8, 8), torch.zeros(16))
    TileOutliers(net, share=0.01).loss(net, torch.randn(16, 3, 8, 8), torch.zeros(16))
    assert seen == [4, 1]


def test_hydra_composes_outliers_with_cifar10_fast():
    from lightning_cls.train import build_module

    cfg = compose(overrides=["experiment=cifar10_fast", "ood_training=outliers"])
    assert OmegaConf.to_container(cfg.ood_training) == OUTLIERS
    data = make_data(LEARNABLE, image_size=32, num_classes=10)
    module = build_module(cfg, data.spec, None, None)
    assert isinstance(module.ood_training, TileOutliers)
    x = torch.randn(4, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as the recipe trains
        loss = module.ood_training.loss(module.net, x, torch.zeros(4, dtype=torch.long))
    assert loss.dtype == torch.float32 and torch.isfinite(loss)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"grid": 1}, ValueError, r"ood_training.grid must be an integer >= 2 .*got grid=1\."),
        ({"share": 0}, ValueError, r"ood_training.share must be in \(0, 1\] .*got share=0\."),
        ({"share": 1.5}, ValueError, r"got share=1.5\."),
        ({"weight": 0}, ValueError, r"got weight=0; ood_training=none turns outlier exposure off"),
        ({"grids": 4}, ValueError, r"ood_training=outliers has no option grids; its options: "),
    ],
)
def test_bad_options_are_refused(options, error, match):
    with pytest.raises(error, match=match):
        build_ood_training({"name": "outliers", **options}, make_module().net)


def test_a_grid_that_does_not_divide_the_image_is_refused():
    options = {"ood_training": {"name": "outliers", "grid": 3}}
    module = make_module(make_data(LEARNABLE), module_kwargs=options)
    with pytest.raises(ValueError, match=r"3x3 tiles, and 16x16 \(H x W\) does not divide by 3"):
        module.ood_training.loss(module.net, torch.randn(2, 3, 16, 16), torch.zeros(2))
