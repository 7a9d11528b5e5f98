"""torchvision models: the name means torchvision's, weights load offline, the head is refitted."""

import logging
import urllib.error

import pytest
import torch
import torchvision
from omegaconf import OmegaConf

from helpers import make_data, make_module
from helpers.hydra_configs import compose
from lightning_cls.models import create_model
from lightning_cls.models.torchvision_models import head_name, preprocessing, read_state_dict
from lightning_cls.module import ClassificationModule


def test_model_torchvision_resnet18_is_torchvisions_not_the_cifar_stem(tmp_path):
    cfg = compose("train", ["data=synthetic", "model=torchvision", "model.name=resnet18"], tmp_path)
    kwargs = OmegaConf.to_container(cfg.model, resolve=True)
    net = create_model(kwargs.pop("name"), **kwargs)
    assert isinstance(net, torchvision.models.ResNet)
    assert net.conv1.kernel_size == (7, 7) and isinstance(net.maxpool, torch.nn.MaxPool2d)
    registry = create_model("resnet18", num_classes=10, in_channels=3, image_size=32)
    assert registry.conv1.kernel_size == (3, 3)  # the registry's own name still means its model


def _saved(tmp_path, name="resnet18", num_classes=10, prefix=""):
    torch.manual_seed(0)
    source = torchvision.models.get_model(name, num_classes=num_classes)
    path = tmp_path / "weights.pth"
    state = {prefix + k: v for k, v in source.state_dict().items()}
    torch.save({"state_dict": state} if prefix else state, path)
    return source, path


@pytest.mark.parametrize("prefix", ["", "net."])  # a state dict, or a lightning_cls checkpoint
def test_weights_path_loads_backbone_and_replaces_the_head(tmp_path, caplog, prefix):
    source, path = _saved(tmp_path, prefix=prefix)
    with caplog.at_level(logging.INFO, logger="lightning_cls.models.torchvision_models"):
        net = create_model("resnet18", source="torchvision", num_classes=3, weights_path=str(path))
    torch.testing.assert_close(net.layer4[1].conv2.weight, source.layer4[1].conv2.weight)
    torch.testing.assert_close(net.bn1.running_var, source.bn1.running_var)
    assert net.fc.weight.shape == (3, 512)
    assert "replaced the classifier head 'fc' (10 -> 3 outputs)" in caplog.text


def test_weights_path_with_same_classes_loads_everything(tmp_path):
    source, path = _saved(tmp_path, "mobilenet_v3_small", num_classes=5)
    net = create_model(
        "mobilenet_v3_small", source="torchvision", num_classes=5, weights_path=str(path)
    )
    assert head_name(net) == "classifier.3"
    x = torch.randn(2, 3, 64, 64)
    source.eval(), net.eval()
    torch.testing.assert_close(net(x), source(x))


def test_weights_of_another_architecture_name_the_first_keys(tmp_path):
    _, path = _saved(tmp_path, "resnet18")
    with pytest.raises(ValueError, match=r"do not fit ResNet: missing layer1\.2\.conv1\.weight"):
        create_model("resnet34", source="torchvision", num_classes=10, weights_path=str(path))
    state = torchvision.models.resnet18(num_classes=10).state_dict()
    state["layer1.0.conv1.weight"] = torch.zeros(64, 64, 1, 1)
    torch.save(state, path)
    with pytest.raises(
        ValueError, match=r"shape mismatch layer1\.0\.conv1\.weight \(64, 64, 1, 1\)"
    ):
        create_model("resnet18", source="torchvision", num_classes=10, weights_path=str(path))


def test_weights_path_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="model.weights_path=.*missing.pth does not exist"):
        read_state_dict(tmp_path / "missing.pth")
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="Cannot read weights from .*junk.pth"):
        read_state_dict(tmp_path / "junk.pth")
    torch.save([1, 2], tmp_path / "list.pth")
    with pytest.raises(ValueError, match="is not a state dict"):
        read_state_dict(tmp_path / "list.pth")


def test_weights_default_offline_says_download_failed_and_how_to_pass_a_file(monkeypatch):
    def offline(self, *args, **kwargs):
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(torchvision.models.ResNet18_Weights, "get_state_dict", offline)
    with pytest.raises(
        ConnectionError,
        match=r"(?s)Downloading the ResNet18_Weights\.IMAGENET1K_V1 "
        r"weights for 'resnet18' failed.*model\.weights_path=/path/to/resnet18-",
    ):
        create_model("resnet18", source="torchvision", num_classes=3, weights="DEFAULT")


def test_unknown_weights_and_both_sources_are_errors(tmp_path):
    with pytest.raises(
        ValueError, match="Unknown weights 'IMAGENET' for torchvision model 'resnet18'; use one of"
    ):
        create_model("resnet18", source="torchvision", weights="IMAGENET")
    with pytest.raises(ValueError, match="not both"):
        create_model("resnet18", source="torchvision", weights="DEFAULT", weights_path="x.pth")
    with pytest.raises(ValueError, match="Unknown model source 'keras'"):
        create_model("resnet18", source="keras")


def test_weights_preprocessing_is_torchvisions():
    assert preprocessing("resnet50", "DEFAULT") == {
        "mean": [0.485, 0.456, 0.406],
        "std": [0.229, 0.224, 0.225],
        "image_size": 224,
        "decode_size": 232,
        "num_channels": 3,
    }


def test_checkpoint_rebuilds_the_torchvision_model(tmp_path):
    _, path = _saved(tmp_path)
    module = make_module(
        make_data(num_channels=3),
        model_name="resnet18",
        module_kwargs={"classes": ["a", "b", "c"]},
        source="torchvision",
        num_classes=None,
        weights_path=str(path),
    )
    assert module.net.fc.out_features == 3  # num_classes from the class names (imagefolder)
    module.hparams.model_kwargs["weights_path"] = None  # the file may be gone at load time
    ckpt = tmp_path / "m.ckpt"
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "pytorch-lightning_version": "2.6.0",
        },
        ckpt,
    )
    loaded = ClassificationModule.load_from_checkpoint(ckpt, weights_only=False)
    assert isinstance(loaded.net, torchvision.models.ResNet)
    torch.testing.assert_close(loaded.net.fc.weight, module.net.fc.weight)
