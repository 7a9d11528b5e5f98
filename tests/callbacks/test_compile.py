from __future__ import annotations

import pytest
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_cls.callbacks import CompileModel
from lightning_cls.checkpointing import check_compatible
from lightning_cls.models import create_model


def _failing_backend(gm, example_inputs):
    raise RuntimeError("simulated compiler failure (no toolchain)")


def _fit(tmp_path, tiny_data, tiny_module, tiny_trainer, callback):
    data = tiny_data()
    module = tiny_module(data)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True, save_top_k=0)
    trainer = tiny_trainer([callback, ckpt], limit_val_batches=0, limit_train_batches=2)
    trainer.fit(module, datamodule=data)
    return module, tmp_path / "ckpt" / "last.ckpt"


def test_compiled_checkpoint_loads_into_uncompiled_model_and_exports(tmp_path, tiny_data, tiny_module, tiny_trainer):
    # aot_eager runs dynamo + AOTAutograd without a C++ compiler: the real compile path, cheaply.
    module, last = _fit(tmp_path, tiny_data, tiny_module, tiny_trainer, CompileModel(backend="aot_eager"))
    assert module.net._compiled_call_impl is not None
    state = torch.load(last, weights_only=True)["state_dict"]
    assert not any("_orig_mod" in k for k in state)
    fresh = tiny_module(tiny_data())
    check_compatible(last, fresh)
    fresh.load_state_dict(state)
    net = fresh.net.eval()
    x = torch.randn(2, 1, 8, 8)
    exported = torch.export.export(net, (x,))
    torch.testing.assert_close(exported.module()(x), net(x))


def test_compile_failure_warns_once_and_trains_eagerly(tmp_path, tiny_data, tiny_module, tiny_trainer):
    with pytest.warns(UserWarning, match="torch.compile failed .*simulated compiler failure.*continues eagerly") as record:
        module, last = _fit(tmp_path, tiny_data, tiny_module, tiny_trainer, CompileModel(backend=_failing_backend))
    assert sum("torch.compile failed" in str(w.message) for w in record) == 1
    assert module.net._compiled_call_impl is None
    assert torch.load(last, weights_only=True)["global_step"] == 2


def test_bad_mode_is_rejected():
    with pytest.raises(ValueError, match="Unknown compile mode 'fastest'"):
        CompileModel(mode="fastest")
