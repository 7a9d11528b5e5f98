"""WhiteningInit: the stem is set from the training split at fit start, its bias freezes."""

import pytest
import torch

from helpers import SGD, make_module
from lightning_cls.callbacks import WhiteningInit
from lightning_cls.callbacks.whitening import training_images


def _airbench_module(data, **kwargs):
    return make_module(
        data, model_name="airbench", optimizer=SGD, widths=(4, 8, 8), whiten=True, **kwargs
    )


def test_fit_start_whitens_training_patches_and_freezes_bias(tiny_data, tiny_trainer):
    data = tiny_data(num_channels=3, image_size=16)
    module = _airbench_module(data)
    before = module.net.stem.weight.clone()
    seen_bias_grad = []

    class Record(WhiteningInit):  # records whether the bias trains in each epoch
        def on_train_epoch_start(self, trainer, pl_module):
            super().on_train_epoch_start(trainer, pl_module)
            seen_bias_grad.append(pl_module.net.stem.bias.requires_grad)

    trainer = tiny_trainer([Record(num_images=40, bias_epochs=1)], max_epochs=2)
    trainer.fit(module, datamodule=data)
    weight = module.net.stem.weight
    assert not torch.equal(weight, before) and not weight.requires_grad
    assert seen_bias_grad == [True, False]
    # The first half of the filters decorrelates the 2x2 patches of those training images.
    images = training_images(data, 40)
    feats = torch.nn.functional.conv2d(images, weight[:12]).transpose(0, 1).reshape(12, -1)
    feats = feats - feats.mean(1, keepdim=True)
    cov = feats @ feats.T / feats.shape[1]
    off_diagonal = cov - torch.diag(torch.diag(cov))
    assert off_diagonal.abs().max() < 0.05 and torch.diag(cov).min() > 0.5


def test_training_images_are_normalized_unaugmented(tiny_data):
    data = tiny_data(num_channels=3, image_size=16, augment="airbench")
    data.setup()
    images = training_images(data, 10)
    raw = data.splits["train"].images[:10].float() / 255
    mean = torch.tensor(data.mean).view(1, 3, 1, 1)
    std = torch.tensor(data.std).view(1, 3, 1, 1)
    torch.testing.assert_close(images, (raw - mean) / std, atol=1e-5, rtol=0)


def test_errors_name_the_value_and_fix(tiny_data, tiny_module, tiny_trainer):
    with pytest.raises(ValueError, match="num_images >= 1, got num_images=0"):
        WhiteningInit(num_images=0)
    with pytest.raises(ValueError, match="bias_epochs must be >= 0 or None.*got -1"):
        WhiteningInit(bias_epochs=-1)
    data = tiny_data()
    with pytest.raises(TypeError, match="SimpleCNN has none. Use model=airbench model.whiten"):
        tiny_trainer([WhiteningInit()]).fit(tiny_module(data), datamodule=data)
    with pytest.raises(ValueError, match=r"reads the training images from the DataModule"):
        training_images(None, 10)
