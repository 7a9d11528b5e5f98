"""Explainer: the default layer of every registered network, layer and target errors, CAM
against Grad-CAM, overlays."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lightning_cls.explain import Explainer, blend, default_layer, load_explainer
from lightning_cls.figures.overlay import colorize
from lightning_cls.inference.spec import InputSpec
from lightning_cls.models import create_model, list_models

SIZE = 16
SPEC = InputSpec(
    classes=("a", "b", "c"), mean=(0.5,) * 3, std=(0.25,) * 3, image_size=SIZE, num_channels=3
)
# The map each built-in network's head reads: its last convolutional stage.
DEFAULTS = {"simplecnn": "features", "resnet18": "layer4", "airbench": "blocks"}
IMAGES = torch.randint(0, 256, (2, 3, SIZE, SIZE), generator=torch.Generator().manual_seed(0))
IMAGES = IMAGES.to(torch.uint8)


def _net(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return create_model(name, num_classes=3, in_channels=3, image_size=SIZE).eval()


@pytest.mark.parametrize("name", list_models())
def test_every_registered_network_has_a_default_layer_or_says_why(name):
    net = _net(name)
    if name == "mlp":
        with pytest.raises(ValueError, match="TwoLayerNet has no convolutional feature map"):
            default_layer(net, SPEC.input_shape)
        return
    layer = default_layer(net, SPEC.input_shape)
    assert layer == DEFAULTS.get(name, layer)
    found = Explainer(net, SPEC).explain(IMAGES)
    assert found.maps.shape == (2, SIZE, SIZE) and found.label == found.probs.argmax(1).tolist()
    assert found.maps.min() >= 0 and found.maps.max() <= 1


def test_a_wrong_layer_name_lists_the_valid_ones_and_the_closest():
    net = _net("resnet18")
    with pytest.raises(ValueError, match=r"layer='layer5' is not a module of CifarResNet\. Did you mean 'layer4'\? Layers with a feature map: conv1, bn1, relu, maxpool, layer1, layer2, layer3, layer4, .*the default is 'layer4'"):  # fmt: skip
        Explainer(net, SPEC, layer="layer5")
    with pytest.raises(ValueError, match=r"layer='fc' outputs no feature map"):
        Explainer(net, SPEC, layer="fc")
    assert Explainer(net, SPEC, layer="layer3.1").map_size == (4, 4)  # any named map


def test_bad_method_and_target_are_named():
    net = _net("simplecnn")
    with pytest.raises(ValueError, match=r"method='gradcam\+\+' is not a heat-map method; use one of gradcam, cam"):  # fmt: skip
        Explainer(net, SPEC, "gradcam++")
    with pytest.raises(ValueError, match=r"target='d' is not a class of this model; .* \(classes: a, b, c\)"):  # fmt: skip
        Explainer(net, SPEC).explain(IMAGES, target="d")
    found = Explainer(net, SPEC).explain(IMAGES, target="c")
    assert found.label == [2, 2]


def test_cam_refuses_a_head_that_is_not_global_pool_and_linear():
    with pytest.raises(ValueError, match=r"method=cam needs a head that is global pooling \+ one linear layer over layer 'features'; SimpleCNN's head 'classifier.4'"):  # fmt: skip
        Explainer(_net("simplecnn"), SPEC, "cam")


def test_grad_cam_of_an_average_pooled_head_equals_cam():
    """For global average pooling + linear, d logit_k / dA_c = W[k, c] / hw at every place, so
    Grad-CAM = relu(CAM) / hw: after scaling, the same map (our Grad-CAM checked by an identity
    that holds for any weights)."""
    net = _net("resnet18")
    grad = Explainer(net, SPEC, "gradcam").explain(IMAGES, target=1).maps
    cam = Explainer(net, SPEC, "cam")
    assert cam.pooling == "avg"
    raw = cam.explain(IMAGES, target=1)  # signed CAM, scaled min..max
    from lightning_cls.explain import methods

    maps, _ = methods.features_and_logits(net, cam.module, SPEC.preprocess(IMAGES), False)
    cams = methods.class_activation_map(maps, cam.head, [0, 1], [1, 1])
    assert torch.allclose(grad, methods.upsampled(cams.relu(), (SIZE, SIZE)), atol=1e-5)
    assert raw.maps.flatten(1).argmax(1).tolist() == grad.flatten(1).argmax(1).tolist()


def test_cam_runs_without_autograd():
    net = _net("airbench")
    explainer = Explainer(net, SPEC, "cam")
    assert explainer.pooling == "max"  # airbench's global max-pool
    with torch.inference_mode():  # no graph can be built here: CAM needs none
        found = explainer.explain(IMAGES)
    assert found.maps.shape == (2, SIZE, SIZE)


def test_load_explainer_refuses_an_exported_graph(tmp_path):
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"not read")
    with pytest.raises(ValueError, match=r"Heat maps are not supported for this onnx model: its graph outputs logits only.*Use the run's .ckpt"):  # fmt: skip
        load_explainer(onnx)


def test_blend_mixes_the_image_with_the_colour_ramp():
    image = np.full((1, 2, 2), 100, np.uint8)  # grey, one channel
    heat = np.array([[0.0, 1.0], [0.5, 0.25]])
    assert (blend(image, heat, alpha=0) == 100).all()
    assert (blend(image, heat, alpha=1) == colorize(heat)).all()
    assert tuple(colorize(heat)[0, 0]) == (0, 0, 143) and tuple(colorize(heat)[0, 1]) == (128, 0, 0)
    with pytest.raises(ValueError, match="heat map \\(3, 3\\) and image \\(2, 2\\) differ"):
        blend(image, np.zeros((3, 3)))
