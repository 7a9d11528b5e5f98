from __future__ import annotations

import pytest
import torch

from lightning_cls.callbacks import OOMAdvisor
from lightning_cls.callbacks.oom import is_out_of_memory, oom_advice


def test_simulated_cuda_oom_gets_halved_batch_doubled_accumulation(
    tiny_data, tiny_module, tiny_trainer
):
    data = tiny_data(batch_size=16)
    module = tiny_module(data)

    def training_step(batch, batch_idx):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    module.training_step = training_step
    trainer = tiny_trainer([OOMAdvisor()], accumulate_grad_batches=2, limit_val_batches=0)
    with pytest.raises(torch.OutOfMemoryError) as info:
        trainer.fit(module, datamodule=data)
    note = "\n".join(getattr(info.value, "__notes__", []))
    assert (
        "data.batch_size=8 trainer.accumulate_grad_batches=4 (same effective batch of 32)" in note
    )


def test_advice_edge_cases():
    assert is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert not is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert "data.batch_size=1" in oom_advice(1, 1)
    for advice in (oom_advice(1, 1), oom_advice(16, 1)):  # config keys that exist (test_configs)
        assert "trainer.precision=bf16-mixed" in advice
        assert "model.checkpoint_activations=true" in advice
