"""GradientClipping: bounds hold (norm, value, adaptive; AMP; accumulation) and a gradient spike
that wrecks an unclipped run is survived with clipping."""

from __future__ import annotations

import math

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.plugins.precision import MixedPrecision

from lightning_cls.callbacks import GradientClipping


class NormSpy(pl.Callback):
    """Listed after GradientClipping: sees the gradients the optimizer will step with."""

    def __init__(self):
        self.norms: list[float] = []
        self.max_abs: list[float] = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        self.norms.append(float(torch.nn.utils.get_total_norm(grads)))
        self.max_abs.append(max(float(g.abs().max()) for g in grads))


class Spike(pl.Callback):
    """Multiplies every gradient by ``scale`` at one optimizer step (a bad batch, a loss blow-up)."""

    def __init__(self, step: int, scale: float):
        self.step, self.scale = step, scale

    def on_after_backward(self, trainer, pl_module):
        if trainer.global_step == self.step:
            for p in pl_module.parameters():
                p.grad.mul_(self.scale)


class Losses(pl.Callback):
    def __init__(self):
        self.values: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.values.append(float(outputs["loss"]))


def _fit(tiny_data, tiny_module, tiny_trainer, callbacks, **trainer_kwargs):
    pl.seed_everything(0)
    data = tiny_data()
    trainer = tiny_trainer(callbacks, limit_val_batches=0, **trainer_kwargs)
    trainer.fit(tiny_module(data), datamodule=data)
    return trainer


@pytest.mark.parametrize("accumulate", [1, 2])
def test_norm_mode_never_exceeds_the_bound(tiny_data, tiny_module, tiny_trainer, accumulate):
    clip, spy, raw = GradientClipping("norm", max_norm=0.05), NormSpy(), NormSpy()
    callbacks = [raw, clip, spy]
    trainer = _fit(
        tiny_data,
        tiny_module,
        tiny_trainer,
        callbacks,
        max_epochs=2,
        accumulate_grad_batches=accumulate,
    )
    # Once per optimizer step, on the accumulated gradient: 3 batches per epoch.
    assert len(spy.norms) == trainer.global_step == 2 * math.ceil(3 / accumulate)
    assert max(raw.norms) > 0.05  # clipping had work to do ...
    assert max(spy.norms) <= 0.05 * (1 + 1e-5)  # ... and the bound held at every step
    logged = trainer.callback_metrics
    assert float(logged["train/grad_norm_after_clip"]) <= 0.05 * (1 + 1e-5)
    assert float(logged["train/grad_norm_before_clip"]) == pytest.approx(raw.norms[-1], rel=1e-5)


def test_value_mode_clamps_every_element(tiny_data, tiny_module, tiny_trainer):
    raw, spy = NormSpy(), NormSpy()
    _fit(
        tiny_data, tiny_module, tiny_trainer, [raw, GradientClipping("value", clip_value=0.01), spy]
    )
    assert max(raw.max_abs) > 0.01
    assert max(spy.max_abs) <= 0.01


def test_adaptive_mode_clips_to_a_multiple_of_the_running_median(
    tiny_data, tiny_module, tiny_trainer
):
    clip = GradientClipping("adaptive", factor=2.0, min_history=3, window=5)
    raw, spy = NormSpy(), NormSpy()
    _fit(tiny_data, tiny_module, tiny_trainer, [raw, Spike(4, 100.0), clip, spy], max_epochs=3)
    for step in range(3, len(raw.norms)):  # from the 4th step on, the median of the last ones
        bound = 2.0 * _median(raw.norms[max(0, step - 5) : step])
        assert spy.norms[step] <= bound * (1 + 1e-5)
    assert raw.norms[4] > 10 * spy.norms[4]  # the spike was cut
    assert spy.norms[:3] == pytest.approx(raw.norms[:3])  # no bound before min_history


def _median(values):
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def test_clipping_sees_unscaled_gradients_under_fp16_amp(tiny_data, tiny_module, tiny_trainer):
    """GradScaler multiplies the loss by 2**16; the hook runs after unscale_, so the bound is
    in true gradient units (the same norms as a float32 run)."""
    fp32 = NormSpy()
    _fit(tiny_data, tiny_module, tiny_trainer, [fp32])
    raw, spy = NormSpy(), NormSpy()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    amp = MixedPrecision("16-mixed", "cpu", scaler)
    callbacks = [raw, GradientClipping(max_norm=0.05), spy]
    trainer = _fit(tiny_data, tiny_module, tiny_trainer, callbacks, plugins=[amp])
    assert trainer.scaler is scaler and scaler.get_scale() >= 2.0**15
    assert raw.norms[0] == pytest.approx(fp32.norms[0], rel=1e-2)
    assert max(spy.norms) <= 0.05 * (1 + 1e-3)


def test_a_gradient_spike_is_survived_with_clipping_and_wrecks_the_run_without(
    tiny_data, tiny_module, tiny_trainer
):
    runs = {}
    for name, extra in {
        "plain": [],
        "clipped": [GradientClipping("adaptive", min_history=3)],
    }.items():
        losses = Losses()
        callbacks = [Spike(5, 1e4), losses, *extra]
        _fit(tiny_data, tiny_module, tiny_trainer, callbacks, max_epochs=8, deterministic=True)
        runs[name] = losses.values
    first, plain, clipped = runs["plain"][0], runs["plain"], runs["clipped"]
    assert plain[:5] == clipped[:5]  # same run up to the spike
    assert min(plain[6:]) > 10 * first  # the spiked update wrecked the weights for good
    assert all(math.isfinite(v) and v < 1.5 * first for v in clipped)  # never blew up ...
    assert sum(clipped[-3:]) / 3 < 0.5 * first  # ... and kept learning


def test_bad_arguments_name_the_fix():
    with pytest.raises(ValueError, match="Unknown clipping mode 'l2'; use one of norm, value"):
        GradientClipping("l2")
    with pytest.raises(ValueError, match=r"mode='norm' needs max_norm > 0 \(e.g. 1.0\), got None"):
        GradientClipping("norm", max_norm=None)
    with pytest.raises(ValueError, match="mode='value' needs clip_value > 0"):
        GradientClipping("value")
    with pytest.raises(ValueError, match="factor > 1.*got factor=0.5"):
        GradientClipping("adaptive", factor=0.5)


def test_history_travels_in_checkpoints():
    clip = GradientClipping("adaptive", window=3, min_history=3)
    clip.history.extend([1.0, 2.0, 3.0])
    other = GradientClipping("adaptive", window=3, min_history=3)
    other.load_state_dict(clip.state_dict())
    assert list(other.history) == [1.0, 2.0, 3.0] and other.history.maxlen == 3


def test_clipping_twice_with_trainer_gradient_clip_val_is_pointed_out(
    tiny_data, tiny_module, tiny_trainer
):
    with pytest.warns(UserWarning, match="trainer.gradient_clip_val=0.5 both clip"):
        _fit(tiny_data, tiny_module, tiny_trainer, [GradientClipping()], gradient_clip_val=0.5)
