import pytest
import torch
from torch import nn

from lightning_cls.models import create_model, list_models, register_model
from lightning_cls.models.registry import MODELS


@pytest.mark.parametrize("name", list_models())
def test_every_registered_model_trains_one_step(name):
    torch.manual_seed(0)
    model = create_model(name, num_classes=10, in_channels=3, image_size=32)
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    logits = model(x)
    assert logits.shape == (4, 10)
    loss = nn.functional.cross_entropy(logits, y)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    opt.step()
    assert nn.functional.cross_entropy(model(x), y).item() != pytest.approx(loss.item())


def test_builtins_are_registered():
    assert {"simplecnn", "mlp", "resnet18"} <= set(list_models())
    assert list_models("res*") == [n for n in list_models() if n.startswith("res")]


def test_simplecnn_is_the_classic_architecture():
    net = create_model("simplecnn", num_classes=10, in_channels=3, image_size=32)
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    fcs = [m for m in net.modules() if isinstance(m, nn.Linear)]
    assert [(c.in_channels, c.out_channels, c.kernel_size) for c in convs] == [
        (3, 32, (3, 3)),
        (32, 64, (3, 3)),
    ]
    assert [(f.in_features, f.out_features) for f in fcs] == [(64 * 8 * 8, 256), (256, 10)]


def test_mlp_input_size_follows_image_shape():
    net = create_model("mlp", num_classes=10, in_channels=1, image_size=8)
    assert net(torch.randn(2, 1, 8, 8)).shape == (2, 10)
    assert net.net[1].in_features == 64


def test_resnet18_has_cifar_stem():
    net = create_model("resnet18", num_classes=10)
    assert net.conv1.kernel_size == (3, 3) and net.conv1.stride == (1, 1)
    assert isinstance(net.maxpool, nn.Identity)


def test_activation_checkpointing_keeps_state_dict_keys_and_gradients():
    torch.manual_seed(0)
    plain = create_model("resnet18", num_classes=10)
    ckpt = create_model("resnet18", num_classes=10, checkpoint_activations=True)
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 32, 32)
    plain(x).sum().backward()
    ckpt(x).sum().backward()
    torch.testing.assert_close(ckpt.fc.weight.grad, plain.fc.weight.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["resnet18", "simplecnn"])
def test_a_deep_copy_of_a_checkpointed_net_runs_its_own_weights(name):
    """EMA and SWA keep a deepcopy: with activation checkpointing its training-mode output
    must follow the copy's weights, not the original's (a patched stage.forward did not)."""
    import copy

    torch.manual_seed(0)
    net = create_model(name, num_classes=10, checkpoint_activations=True).train()
    twin = copy.deepcopy(net)
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(0.5)
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    plain = create_model(name, num_classes=10).train()  # no checkpointing, the copy's weights
    plain.load_state_dict(twin.state_dict())
    torch.testing.assert_close(twin(x), plain(x))


def test_torchvision_model_by_name():
    net = create_model("mobilenet_v3_small", num_classes=7)
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 7)


def test_unknown_model_suggests_closest_and_lists_known():
    with pytest.raises(
        ValueError, match=r"Unknown model 'resnet81'\. Did you mean 'resnet18'\? Known: .*simplecnn"
    ):
        create_model("resnet81")


def test_duplicate_name_is_an_error_and_classes_register_like_builders():
    class Tiny(nn.Linear):
        def __init__(self, num_classes: int = 10, in_channels: int = 3, image_size: int = 32):
            super().__init__(in_channels * image_size * image_size, num_classes)

        def forward(self, x):
            return super().forward(torch.flatten(x, 1))

    register_model("_test_tiny")(Tiny)
    try:
        assert create_model("_test_tiny", num_classes=3, image_size=4)(
            torch.randn(2, 3, 4, 4)
        ).shape == (2, 3)
        with pytest.raises(
            ValueError, match="'_test_tiny' is already registered by .*Tiny; .*second must"
        ):

            @register_model("_test_tiny")
            def second(**kw):
                return nn.Identity()
    finally:
        MODELS._builders.pop("_test_tiny", None)


def test_builder_that_returns_no_module_is_named():
    register_model("_test_bad")(dict)
    try:
        with pytest.raises(
            TypeError, match=r"Model '_test_bad' \(builtins\.dict\) returned a dict; .*torch\.nn"
        ):
            create_model("_test_bad")
    finally:
        MODELS._builders.pop("_test_bad", None)


def test_simplecnn_rejects_bad_options():
    with pytest.raises(ValueError, match="image_size divisible by 4.*got 30"):
        create_model("simplecnn", image_size=30)
    with pytest.raises(ValueError, match="Unknown init 'xavier'"):
        create_model("simplecnn", init="xavier")


@pytest.mark.parametrize("name", list_models())
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
def test_every_registered_model_scripts(name):
    """`export=all` includes TorchScript's script mode, so every built-in must compile."""
    net = create_model(name, num_classes=10, in_channels=3, image_size=32).eval()
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(torch.jit.script(net)(x), net(x), atol=1e-5, rtol=1e-4)
