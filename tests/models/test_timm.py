"""timm models (optional extra): offline weights through pretrained_cfg_overlay, input spec."""

import pytest
import torch

from lightning_cls.models import create_model

timm = pytest.importorskip("timm")

from lightning_cls.models.timm_models import preprocessing  # noqa: E402


def test_timm_weights_path_loads_offline_and_refits_the_head(tmp_path):
    torch.manual_seed(0)
    source = timm.create_model("resnet18", num_classes=1000)
    path = tmp_path / "resnet18.pth"
    torch.save(source.state_dict(), path)
    net = create_model("resnet18", source="timm", num_classes=4, weights_path=str(path))
    torch.testing.assert_close(net.conv1.weight, source.conv1.weight)
    torch.testing.assert_close(net.layer3[0].bn1.running_mean, source.layer3[0].bn1.running_mean)
    assert net.fc.weight.shape == (4, 512)
    assert preprocessing(net) == {
        "mean": [0.485, 0.456, 0.406],
        "std": [0.229, 0.224, 0.225],
        "image_size": 224,
        "decode_size": 235,  # 224 / crop_pct 0.95
        "num_channels": 3,
    }


def test_timm_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="Unknown timm model 'resnet181'"):
        create_model("resnet181", source="timm", num_classes=2)
    with pytest.raises(FileNotFoundError, match="model.weights_path=.*nope.pth does not exist"):
        create_model(
            "resnet18", source="timm", num_classes=2, weights_path=str(tmp_path / "nope.pth")
        )
