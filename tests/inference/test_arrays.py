"""The numpy path (ONNX Runtime, OpenVINO: predict and serve without torch) gives the torch
path's answers: preprocessing (resize, centre crop, normalize), flip/translate TTA,
probabilities, labels and the multi-label threshold, on the same images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from lightning_cls.inference import InputSpec, Predictor, arrays, load_artifact, predict_files
from lightning_cls.inference.images import load_image_batch
from lightning_cls.inference.spec import normalize
from lightning_cls.inference.tasks import create_task
from lightning_cls.inference.tta import TTA, tta

SIZE, RESIZE = 8, 10


def test_normalize_numpy_is_the_torch_normalize_bit_for_bit():
    for channels in (1, 3):
        images = np.random.default_rng(channels).integers(0, 256, (4, channels, 5, 7), np.uint8)
        mean, std = (0.49, 0.48, 0.45)[:channels], (0.25, 0.24, 0.26)[:channels]
        got = normalize(images, mean, std)
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        assert np.array_equal(got, normalize(torch.from_numpy(images), mean, std).numpy())
    with pytest.raises(
        TypeError, match=r"normalize expects uint8 images in \[0, 255\], got float32"
    ):
        normalize(np.zeros((1, 1, 2, 2), np.float32), (0.5,), (0.5,))
    with pytest.raises(ValueError, match=r"mean/std have 3/3 values but the batch has 1 channels"):
        normalize(np.zeros((1, 1, 2, 2), np.uint8), (0.5,) * 3, (0.5,) * 3)


def _photos(root: Path) -> list[Path]:
    """Images of other sizes and modes than the model's: resized, centre-cropped, converted."""
    rng = np.random.default_rng(0)
    shapes = [((13, 21, 3), "RGB"), ((30, 11, 4), "RGBA"), ((8, 8), "L"), ((17, 17, 3), "RGB")]
    paths = []
    for i, (shape, mode) in enumerate(shapes):
        paths.append(root / f"photo{i}.png")
        Image.fromarray(rng.integers(0, 256, shape, np.uint8), mode).save(paths[-1])
    return paths


def test_decoded_and_normalized_photos_are_the_same_on_both_paths(tmp_path):
    spec = _spec(resize_size=RESIZE)
    batch, ok, failed = load_image_batch(_photos(tmp_path), SIZE, 3, RESIZE)
    assert isinstance(batch, np.ndarray) and batch.shape == (4, 3, SIZE, SIZE) and not failed
    numpy_x, torch_x = spec.preprocess(batch), spec.preprocess(torch.from_numpy(batch))
    assert isinstance(numpy_x, np.ndarray) and isinstance(torch_x, torch.Tensor)
    assert np.array_equal(numpy_x, torch_x.numpy())


@pytest.mark.parametrize(("flip", "translate"), [(True, 0), (False, 1), (True, 2)])
def test_tta_on_arrays_equals_tta_on_tensors(flip, translate):
    weight = np.random.default_rng(1).normal(size=(3 * SIZE * SIZE, 4)).astype(np.float32)
    x = np.random.default_rng(2).normal(size=(5, 3, SIZE, SIZE)).astype(np.float32)
    on_numpy = tta(lambda v: v.reshape(len(v), -1) @ weight, x, flip, translate)
    on_torch = tta(lambda v: v.flatten(1) @ torch.from_numpy(weight), torch.from_numpy(x), flip, translate)  # fmt: skip
    assert isinstance(on_numpy, np.ndarray) and on_numpy.dtype == np.float32
    np.testing.assert_allclose(on_numpy, on_torch.numpy(), rtol=1e-5, atol=1e-5)
    assert not np.allclose(on_numpy, x.reshape(5, -1) @ weight, atol=1e-3)  # TTA did something


@pytest.mark.parametrize(("task", "threshold"), [("multiclass", None), ("multilabel", 0.3), ("multilabel", 0.7)])  # fmt: skip
def test_probabilities_and_decisions_agree(task, threshold):
    decision = create_task(task, threshold)
    logits = np.random.default_rng(3).normal(scale=4, size=(64, 6)).astype(np.float32)
    logits[0] = [40, -40, 0, 1, -1, 12]  # saturated: probabilities near 0 and at 1
    probs = decision.probabilities(logits)
    expected = decision.probabilities(torch.from_numpy(logits))
    assert isinstance(probs, np.ndarray) and probs.dtype == np.float32
    np.testing.assert_allclose(probs, expected.numpy(), rtol=1e-6, atol=1e-7)
    (indices, values), (want_indices, want_values) = (
        decision.decide(probs, 3),
        decision.decide(torch.from_numpy(probs), 3),
    )
    assert indices == want_indices
    flat, want_flat = np.concatenate([*values, []]), np.concatenate([*want_values, []])
    np.testing.assert_allclose(flat, want_flat, rtol=1e-6, atol=1e-7)
    assert np.array_equal(decision.predicted(probs), decision.predicted(torch.from_numpy(probs)))
    if threshold is not None:  # every label at or above it, and only those
        for row, idx in zip(probs, indices):
            assert sorted(idx) == sorted(np.flatnonzero(row >= threshold).tolist())


def _spec(**overrides) -> InputSpec:
    fields = dict(classes=list("abcde"), mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3),
                  image_size=SIZE, num_channels=3, tta=TTA(flip=True, translate=1))  # fmt: skip
    return InputSpec(**{**fields, **overrides})


class NumpyLinear:
    """A runtime that takes and gives numpy (as ONNX Runtime does): flatten, then a matmul."""

    arrays = "numpy"
    kind = "numpy-linear"

    def __init__(self, weight: np.ndarray):
        self.weight, self.calls = weight, []

    def __call__(self, x: np.ndarray) -> np.ndarray:
        assert isinstance(x, np.ndarray) and x.flags.c_contiguous and x.dtype == np.float32
        self.calls.append(x.shape)
        return x.reshape(len(x), -1) @ self.weight


class TorchLinear(torch.nn.Module):
    def __init__(self, weight: np.ndarray):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.from_numpy(weight.copy()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) @ self.weight


@pytest.mark.parametrize(("task", "threshold"), [("multiclass", None), ("multilabel", 0.4)])
def test_predict_files_gives_the_same_rows_on_both_paths(tmp_path, task, threshold):
    spec = _spec(task={"name": task, "threshold": threshold}, resize_size=RESIZE)
    weight = np.random.default_rng(4).normal(scale=0.05, size=(3 * SIZE * SIZE, 5))
    numpy_path = Predictor(NumpyLinear(weight.astype(np.float32)), spec)
    torch_path = Predictor(TorchLinear(weight.astype(np.float32)), spec)
    assert numpy_path.arrays == "numpy" and torch_path.arrays == "torch"
    files = _photos(tmp_path)
    rows, failures = predict_files(numpy_path, files, batch_size=3, top_k=2)
    want, _ = predict_files(torch_path, files, batch_size=3, top_k=2)
    assert not failures and [r["labels"] for r in rows] == [r["labels"] for r in want]
    if task == "multilabel":  # labels chosen by the threshold: some images have several
        assert {len(r["labels"]) for r in rows} != {1}
    for got, expected in zip(rows, want):
        np.testing.assert_allclose(got["probs"], expected["probs"], rtol=1e-5, atol=1e-6)
    # flip + translate TTA: 6 model calls per batch of 3, plus none for the spec (no load here)
    assert numpy_path.runtime.calls == [(3, 3, SIZE, SIZE)] * 6 + [(1, 3, SIZE, SIZE)] * 6


def test_a_predictor_answers_in_the_kind_it_is_given():
    spec = _spec()
    weight = np.random.default_rng(5).normal(size=(3 * SIZE * SIZE, 5)).astype(np.float32)
    images = np.random.default_rng(6).integers(0, 256, (4, 3, SIZE, SIZE), np.uint8)
    answers = {}
    for name, predictor in (("numpy", Predictor(NumpyLinear(weight), spec)),
                            ("torch", Predictor(TorchLinear(weight), spec))):  # fmt: skip
        from_numpy = predictor.predict_images(images, batch_size=3)
        from_torch = predictor.predict_images(torch.from_numpy(images), batch_size=3)
        assert isinstance(from_numpy, np.ndarray) and isinstance(from_torch, torch.Tensor)
        np.testing.assert_allclose(from_numpy, from_torch.numpy(), rtol=1e-6, atol=1e-7)
        empty = predictor.predict_images(images[:0])
        assert isinstance(empty, np.ndarray) and empty.shape == (0, 5)
        answers[name] = from_numpy
    np.testing.assert_allclose(answers["numpy"], answers["torch"], rtol=1e-5, atol=1e-6)


def test_the_onnx_file_on_numpy_equals_its_checkpoint_on_torch(artifacts, tmp_path):
    """The trained flip + translate TTA model: its ONNX export through the numpy path, its
    checkpoint through torch, on the same PNG files."""
    files = []
    for i, image in enumerate(artifacts.images[:6].permute(0, 2, 3, 1).numpy()):
        files.append(tmp_path / f"{i}.png")
        Image.fromarray(image.squeeze()).save(files[-1])
    onnx, ckpt = load_artifact(artifacts.paths["onnx"]), load_artifact(artifacts.paths["ckpt"])
    assert onnx.arrays == "numpy" and ckpt.arrays == "torch"
    rows, _ = predict_files(onnx, files, top_k=3)
    want, _ = predict_files(ckpt, files, top_k=3)
    assert [r["labels"] for r in rows] == [r["labels"] for r in want]
    for got, expected in zip(rows, want):
        np.testing.assert_allclose(got["probs"], expected["probs"], rtol=1e-4, atol=1e-5)
    x = artifacts.spec.preprocess(artifacts.images[:6].numpy())
    logits = onnx.tta_logits(x)
    assert isinstance(logits, np.ndarray)
    np.testing.assert_allclose(logits, ckpt.tta_logits(x), rtol=1e-4, atol=1e-4)
    assert arrays.is_numpy(onnx.runtime(x)) and not arrays.is_numpy(
        onnx.runtime(torch.from_numpy(x))
    )
