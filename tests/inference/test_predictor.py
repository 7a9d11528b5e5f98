"""``lightning_cls.inference``: Lightning-free, equal to ``predict_step`` (TTA included) for
every artifact kind, clear errors for foreign or old artifacts."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from lightning_cls.inference import (
    TTA,
    InputSpec,
    Predictor,
    flip_tta,
    load_artifact,
    predict_files,
)
from lightning_cls.inference.runtimes import RUNTIMES, OnnxRuntime, register_runtime
from lightning_cls.inference.spec import normalize

KINDS = ("ckpt", "weights", "onnx", "torchscript", "pt2")


def test_importing_inference_pulls_in_neither_lightning_nor_hydra():
    code = (
        "import sys, lightning_cls.inference\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pytorch_lightning', 'lightning', 'hydra', 'omegaconf')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("kind", KINDS)
def test_predictions_equal_predict_step_with_flip_and_translate_tta(artifacts, kind):
    # The fixture trains with flip + 1-pixel translate TTA: this test covers both.
    assert artifacts.spec.tta == TTA(flip=True, translate=1)
    x = artifacts.spec.preprocess(artifacts.images)
    with torch.no_grad():
        expected = artifacts.module.predict_step(x, 0)
        no_tta = artifacts.module.net(x).softmax(1)
        flip_only = flip_tta(artifacts.module.net, x).softmax(1)
    assert not torch.allclose(expected, no_tta, atol=1e-4)  # TTA changes the answer here
    assert not torch.allclose(expected, flip_only, atol=1e-4)  # and so does translation
    predictor = load_artifact(artifacts.paths[kind], trust_artifact=True)
    assert predictor.spec == InputSpec.from_dict(
        {**artifacts.spec.to_dict(), **predictor.spec.to_dict()}
    )
    assert predictor.spec.tta == TTA(flip=True, translate=1)
    got = predictor.predict_images(artifacts.images, batch_size=len(artifacts.images))
    if kind in ("ckpt", "weights"):  # the same eager network: bit for bit
        torch.testing.assert_close(got, expected, atol=0, rtol=0)
    else:
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_normalize_is_the_training_normalize():
    from lightning_cls.data.augment import normalize as train_normalize

    images = torch.randint(0, 256, (4, 3, 5, 5), dtype=torch.uint8)
    mean, std = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)
    assert torch.equal(normalize(images, mean, std), train_normalize(images, mean, std))


def test_onnx_from_another_tool_names_the_keys_to_pass(artifacts, tmp_path):
    import onnx

    model = onnx.load(str(artifacts.paths["onnx"]))
    del model.metadata_props[:]
    foreign = tmp_path / "foreign.onnx"
    onnx.save(model, str(foreign))
    with pytest.raises(
        ValueError,
        match=r"foreign\.onnx .*lacks classes, mean, std, image_size, "
        r"num_channels.*\+spec\.classes=\.\.\.",
    ):
        load_artifact(foreign)
    keys = {
        k: v
        for k, v in artifacts.spec.to_dict().items()
        if k in ("classes", "mean", "std", "image_size", "num_channels")
    }
    predictor = load_artifact(foreign, spec=keys)
    x = artifacts.spec.preprocess(artifacts.images)
    torch.testing.assert_close(
        predictor.logits(x), load_artifact(artifacts.paths["onnx"]).logits(x)
    )


def test_checkpoint_from_another_version_names_the_missing_key(artifacts, tmp_path):
    ckpt = torch.load(artifacts.paths["ckpt"], map_location="cpu", weights_only=True)
    for key in ("classes", "mean"):
        del ckpt["hyper_parameters"][key]
    old = tmp_path / "old.ckpt"
    torch.save(ckpt, old)
    with pytest.raises(
        ValueError,
        match=r"old\.ckpt: its hyper_parameters lacks classes, mean\. "
        r"It was written by .*another version of lightning_cls",
    ):
        load_artifact(old)
    fixed = load_artifact(
        old, spec={"classes": list(artifacts.spec.classes), "mean": list(artifacts.spec.mean)}
    )
    assert fixed.spec.classes == artifacts.spec.classes
    torch.save({"epoch": 3}, tmp_path / "no_state.ckpt")
    with pytest.raises(ValueError, match=r"has no 'state_dict' \(keys: epoch\)"):
        load_artifact(tmp_path / "no_state.ckpt")


def test_batch_size_and_top_k_must_be_positive(artifacts):
    predictor = load_artifact(artifacts.paths["onnx"])
    for bad in (0, -1):
        with pytest.raises(ValueError, match=rf"batch_size must be an integer >= 1, got {bad}"):
            predictor.predict_images(artifacts.images, batch_size=bad)
    with pytest.raises(ValueError, match=r"top_k must be an integer >= 1, got 0"):
        predict_files(predictor, [], top_k=0)


def test_a_new_runtime_is_one_class_and_one_registration(artifacts, tmp_path):
    class CountingOnnx(OnnxRuntime):
        kind = "counting"
        calls = 0

        def __call__(self, x):
            CountingOnnx.calls += 1
            return super().__call__(x)

    path = tmp_path / "model.counting"
    path.write_bytes(artifacts.paths["onnx"].read_bytes())
    register_runtime(".counting", CountingOnnx)
    try:
        predictor = load_artifact(path)
        probs = predictor.predict_images(artifacts.images[:2])
    finally:
        del RUNTIMES[".counting"]
    # one dry batch when loaded (the spec check), then image + mirror (flip TTA) for the image
    # and its two 1-pixel shifts (translate TTA)
    assert predictor.kind == "counting" and CountingOnnx.calls == 1 + 6
    assert probs.shape == (2, 3)
    with pytest.raises(ValueError, match=r"already served by OnnxRuntime"):
        register_runtime(".onnx", CountingOnnx)


def test_eager_predictor_from_a_module(artifacts):
    predictor = Predictor(artifacts.module.net, artifacts.spec)
    x = artifacts.spec.preprocess(artifacts.images)
    with torch.no_grad():
        torch.testing.assert_close(predictor.predict_proba(x), artifacts.module.predict_step(x, 0))


def test_predict_files_decodes_with_the_specs_resize_size(artifacts, tmp_path):
    import numpy as np
    from PIL import Image

    from lightning_cls.inference import decode_image

    path = tmp_path / "wide.png"
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (20, 36, 3), dtype=np.uint8)).save(path)
    predictor = load_artifact(artifacts.paths["onnx"], spec={"resize_size": 16})
    (row,), failures = predict_files(predictor, [path], top_k=3)
    assert not failures
    pixels = torch.from_numpy(decode_image(path, 12, 3, resize_size=16).copy())[None]  # centre crop
    expected = predictor.predict_images(pixels)[0].topk(3)
    np.testing.assert_allclose(row["probs"], expected.values.numpy(), rtol=1e-6)
    squashed = torch.from_numpy(decode_image(path, 12, 3).copy())[None]  # whole image, resized
    assert not torch.allclose(predictor.predict_images(squashed), predictor.predict_images(pixels))
