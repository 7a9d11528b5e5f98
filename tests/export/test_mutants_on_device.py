"""Issue 51's mutation pass over the on-device exports, where test_on_device.py cannot look:
LiteRT's INT8 quantize/dequantize (its tests skip without litert-torch's environment) and the
graph Core ML converts (Core ML predicts only on macOS, so its file is checked by its spec):
the recipe divides by the spec's std and answers the task's probabilities after the
temperature. No converter runs: each test takes milliseconds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from lightning_cls.inference import InputSpec
from lightning_cls.inference.litert import dequantized, quantized

INT8 = {"dtype": np.int8, "quantization": (0.05, 3)}


def test_litert_quantizes_an_int8_input_with_its_scale_and_zero_point():
    x = np.array([[0.5, -1.0, 0.0, 10.0, -10.0]], np.float32)
    q = quantized(x, INT8)
    assert q.dtype == np.int8
    assert q.tolist() == [[13, -17, 3, 127, -128]]  # round(x / 0.05) + 3, clipped to int8
    np.testing.assert_array_equal(quantized(x, {"dtype": np.float32}), x)  # float: as is


def test_litert_dequantizes_an_int8_output_and_round_trips():
    a = np.array([[13, -17, 3]], np.int8)
    np.testing.assert_allclose(dequantized(a, INT8), [[0.5, -1.0, 0.0]], atol=1e-6)
    x = np.linspace(-5, 5, 41, dtype=np.float32)[None]
    np.testing.assert_allclose(dequantized(quantized(x, INT8), INT8), x, atol=0.025 + 1e-6)


def test_the_core_ml_recipe_divides_by_std_and_answers_tempered_probabilities():
    from lightning_cls.export.coreml import _Recipe

    spec = InputSpec(classes=("a", "b", "c"), mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.5),
                     image_size=4, num_channels=3, task={"temperature": 2.0})  # fmt: skip
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(48, 3)).eval()
    x = torch.rand(2, 3, 4, 4) - 0.5  # what Core ML's ImageType gives: pixel / 255 - mean
    std = torch.tensor(spec.std).view(1, -1, 1, 1)
    with torch.no_grad():
        got = _Recipe(net, spec).eval()(x)
        want = torch.softmax(net(x / std) / 2.0, dim=1)
    torch.testing.assert_close(got, want)
    assert got.sum(1).tolist() == pytest.approx([1.0, 1.0])
