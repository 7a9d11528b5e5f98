from __future__ import annotations

import copy
import types
import warnings

import pytest
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch import nn
from torch._dynamo.exc import BackendCompilerFailed, TorchRuntimeError

from lightning_cls.callbacks import CompileModel
from lightning_cls.callbacks.compile import guarded
from lightning_cls.training.resume import check_compatible


def _failing_backend(gm, example_inputs):
    raise RuntimeError("simulated compiler failure (no toolchain)")


def _fit(tmp_path, tiny_data, tiny_module, tiny_trainer, callback):
    data = tiny_data()
    module = tiny_module(data)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True, save_top_k=0)
    trainer = tiny_trainer([callback, ckpt], limit_val_batches=0, limit_train_batches=2)
    trainer.fit(module, datamodule=data)
    return module, tmp_path / "ckpt" / "last.ckpt"


def test_compiled_checkpoint_loads_into_uncompiled_model_and_exports(
    tmp_path, tiny_data, tiny_module, tiny_trainer
):
    # aot_eager runs dynamo + AOTAutograd without a C++ compiler: the real compile path, cheaply.
    module, last = _fit(
        tmp_path, tiny_data, tiny_module, tiny_trainer, CompileModel(backend="aot_eager")
    )
    assert "forward" in vars(module.net)  # compiled: the instance's forward is the guarded one
    state = torch.load(last, weights_only=True)["state_dict"]
    assert not any("_orig_mod" in k for k in state)
    fresh = tiny_module(tiny_data())
    check_compatible(last, fresh)
    fresh.load_state_dict(state)
    net = fresh.net.eval()
    x = torch.randn(2, 1, 8, 8)
    exported = torch.export.export(net, (x,))
    torch.testing.assert_close(exported.module()(x), net(x))


def test_compile_failure_warns_once_and_trains_eagerly(
    tmp_path, tiny_data, tiny_module, tiny_trainer
):
    callback = CompileModel(backend=_failing_backend)
    with pytest.warns(
        UserWarning, match="torch.compile failed .*simulated compiler failure.*continues eagerly"
    ) as record:
        _, last = _fit(tmp_path, tiny_data, tiny_module, tiny_trainer, callback)
    assert sum("torch.compile failed" in str(w.message) for w in record) == 1
    assert isinstance(callback.failure, BackendCompilerFailed)
    assert torch.load(last, weights_only=True)["global_step"] == 2


def test_bad_mode_is_rejected():
    with pytest.raises(ValueError, match="Unknown compile mode 'fastest'"):
        CompileModel(mode="fastest")


class Counting(nn.Module):
    """Counts how often its forward body runs (BatchNorm statistics would change as often)."""

    def __init__(self, in_features: int = 3):
        super().__init__()
        self.linear, self.calls = nn.Linear(in_features, 2), 0

    def forward(self, x):
        self.calls += 1
        return self.linear(x)


def _compile(net, **options):
    CompileModel(**options).setup(
        None, types.SimpleNamespace(net=net, device=torch.device("cpu")), "fit"
    )
    return net


def test_a_compiler_failure_runs_the_forward_once_eagerly():
    net = _compile(Counting(), backend=_failing_backend)
    x = torch.randn(4, 3)
    with pytest.warns(UserWarning, match="torch.compile failed"):
        out = net(x)
    torch.testing.assert_close(out, net.linear(x))
    assert net.calls == 1
    net(x)
    assert net.calls == 2  # eager from then on, no second warning or compile attempt


def test_a_bug_in_the_model_is_not_swallowed():
    net = _compile(Counting(in_features=5), backend="aot_eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "continues eagerly" warning either
        with pytest.raises(TorchRuntimeError, match="must have same reduction dim"):
            net(torch.randn(4, 3))  # (4, 3) @ (5, 2): the model's bug, found while tracing


def test_out_of_memory_propagates_even_from_the_compiler():
    def compiled(self, x):
        raise BackendCompilerFailed(_failing_backend, torch.OutOfMemoryError("out of memory"), None)

    def oom(self, x):
        raise torch.OutOfMemoryError("CUDA out of memory")

    eager_calls = []
    for attempt in (compiled, oom):
        forward = guarded(lambda self, x: eager_calls.append(x), attempt, pytest.fail)
        with pytest.raises((torch.OutOfMemoryError, BackendCompilerFailed)):
            forward(None, torch.zeros(1))
    assert eager_calls == []  # no retry: retrying an OOM in eager mode only OOMs again


def test_a_copy_of_a_compiled_network_runs_its_own_weights():
    net = _compile(Counting(), backend="aot_eager")
    x = torch.randn(4, 3)
    net(x)
    twin = copy.deepcopy(net)  # as EMA/SWA callbacks copy the module
    with torch.no_grad():
        twin.linear.weight.zero_()
        twin.linear.bias.zero_()
    assert torch.count_nonzero(twin(x)) == 0 and torch.count_nonzero(net(x)) > 0
