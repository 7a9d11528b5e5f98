"""export=onnx_e2e: uint8 NHWC in, probabilities out, preprocessing/TTA/softmax in the graph."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
import torch

from lightning_cls.export import export_format
from lightning_cls.export.errors import ExportCheckError
from lightning_cls.export.exporter import ExportConfig, export_model
from lightning_cls.export.onnx import read_metadata
from lightning_cls.export.onnx_e2e import (
    INPUT_NAME,
    OUTPUT_NAME,
    OnnxE2EWriter,
    e2e_spec,
    example_images,
)
from lightning_cls.inference import load_artifact
from lightning_cls.inference.runtimes import make_session
from lightning_cls.inference.tta import TTA


class _ExportsDifferently(torch.nn.Module):
    """Eager: ``net``; while torch.export traces it: ``net`` with doubled logits."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        logits = self.net(x)
        return logits * 2 if torch.compiler.is_exporting() else logits


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(1, keepdims=True))
    return z / z.sum(1, keepdims=True)


def test_e2e_graph_takes_uint8_nhwc_and_matches_normalising_by_hand(trained, tmp_path):
    """The e2e file equals plain model.onnx fed with pixels normalised by hand in NumPy."""
    spec = dataclasses.replace(trained.spec, mean=(0.4, 0.5, 0.6), std=(0.2, 0.25, 0.3))
    out = tmp_path / "export"
    paths = export_model(trained.net, spec, out, ExportConfig(formats=["onnx", "onnx_e2e"])).paths
    assert paths["onnx_e2e"] == out / "model_e2e.onnx"
    assert sorted(p.name for p in out.iterdir()) == ["meta.json", "model.onnx", "model_e2e.onnx"]
    model = onnx.load(str(paths["onnx_e2e"]))
    (inp,), (outp,) = model.graph.input, model.graph.output
    assert (inp.name, outp.name) == (INPUT_NAME, OUTPUT_NAME)
    assert inp.type.tensor_type.elem_type == onnx.TensorProto.UINT8
    dims = [d.dim_value or d.dim_param for d in inp.type.tensor_type.shape.dim]
    assert dims == ["batch", 16, 16, 3]  # NHWC, dynamic batch, fixed image_size
    stored = read_metadata(paths["onnx_e2e"])
    assert stored == e2e_spec(spec) and stored.layout == "NHWC"
    assert (stored.classes, stored.mean, stored.std) == (spec.classes, spec.mean, spec.std)

    e2e, plain = make_session(paths["onnx_e2e"]), make_session(paths["onnx"])
    for batch_size in (1, 5):
        images = example_images(spec, batch_size, seed=10 + batch_size).numpy()  # (B, H, W, C)
        x = (images.astype(np.float32) / 255 - np.float32(spec.mean)) / np.float32(spec.std)
        (logits,) = plain.run(None, {"input": x.transpose(0, 3, 1, 2).copy()})
        (probs,) = e2e.run(None, {INPUT_NAME: images})
        assert probs.shape == (batch_size, spec.num_classes)
        np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-5)
        np.testing.assert_allclose(probs, _softmax(logits), atol=1e-5, rtol=1e-4)
    # lightning_cls's own loaders take the plain model.onnx; the e2e file is for other servers.
    with pytest.raises(
        ValueError, match="model_e2e.onnx is an end-to-end model .* load the model.onnx"
    ):
        load_artifact(paths["onnx_e2e"])


def test_e2e_graph_applies_the_specs_tta_like_the_predictor(trained, tmp_path):
    spec = dataclasses.replace(trained.spec, tta=TTA(flip=True, translate=1))
    path = export_format(
        "onnx_e2e", trained.net, spec, tmp_path / "e2e.onnx", check_batch_sizes=(1, 7)
    )
    images = example_images(spec, 6, seed=3)
    (probs,) = make_session(path).run(None, {INPUT_NAME: images.numpy()})
    nchw = images.permute(0, 3, 1, 2).contiguous()
    # The same network from the checkpoint, run by lightning_cls with the TTA spec.
    expected = load_artifact(trained.ckpt, spec=spec).predict_images(nchw)
    torch.testing.assert_close(torch.from_numpy(probs), expected, atol=1e-5, rtol=1e-4)
    without_tta = load_artifact(trained.ckpt).predict_images(nchw)
    assert not torch.allclose(torch.from_numpy(probs), without_tta, atol=1e-4)


class _ForgetsTheLayout(OnnxE2EWriter):
    """Writes the e2e graph with the plain spec (NCHW): a reader would normalise twice."""

    def write(self, net, example, tmp, spec):
        from lightning_cls.export.onnx import write_onnx
        from lightning_cls.export.onnx_e2e import EndToEnd

        write_onnx(EndToEnd(net, spec).eval(), example, tmp, spec, 18, INPUT_NAME, OUTPUT_NAME)


def test_e2e_check_fails_loudly_and_leaves_no_file(trained, tmp_path):
    from lightning_cls.export.writer import write_verified

    path = export_format(
        "onnx_e2e", trained.net, trained.spec, tmp_path / "e2e.onnx", check_batch_sizes=()
    )
    before = path.read_bytes()
    # The file read back must carry e2e_spec (layout NHWC), not the plain spec.
    with pytest.raises(ValueError, match=r"input spec did not survive the round trip.*NHWC"):
        write_verified(_ForgetsTheLayout(), trained.net, trained.spec, path)
    assert path.read_bytes() == before
    # A graph that differs from eager fails the export and keeps the final name free (the
    # file was written and checked under a temp name).
    with pytest.raises(ExportCheckError, match=r"ONNX bad\.onnx at batch 2"):
        export_format(
            "onnx_e2e",
            _ExportsDifferently(trained.net),
            trained.spec,
            tmp_path / "bad.onnx",
            check_batch_sizes=(2,),
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e2e.onnx"]


def test_export_onnx_e2e_config_composes(helpers, tmp_path):
    from hydra.utils import instantiate

    config = instantiate(helpers.compose(["export=onnx_e2e"], tmp_path).export)
    assert config.formats == ["onnx_e2e"]
    config = instantiate(helpers.compose(["export=triton_e2e"], tmp_path).export)
    assert (
        config.formats == ["onnx_e2e", "triton"]
        and config.options["triton"]["source"] == "onnx_e2e"
    )


@pytest.mark.parametrize("score", ["msp", "energy"])
def test_e2e_refuses_a_rejection_rule_in_one_line_before_writing(trained, tmp_path, score):
    """Probabilities are all the file answers: a server would answer without the rule. Refused
    by the skeleton itself (``export_format`` alone), not only by ``export_model``."""
    rule = {"score": score, "threshold": 0.5, "keep": 0.95}
    spec = trained.spec.with_decision(reject=rule)
    with pytest.raises(
        ValueError,
        match=rf"^export=onnx_e2e: the model is calibrated with reject={score}, which the "
        r"end-to-end file does not carry .*; use export=onnx, which predict and serve run with "
        r"the rule, or export a checkpoint calibrated without it\.$",
    ):
        export_format("onnx_e2e", trained.net, spec, tmp_path / "model_e2e.onnx")
    assert not list(tmp_path.iterdir())


def test_e2e_graph_applies_the_temperature_and_selective_tta_like_the_predictor(trained, tmp_path):
    """A calibrated model (T != 1) with selective TTA: the graph's probabilities are the
    checkpoint's as predict computes them (the export's own check compares them too)."""
    calibrated = trained.spec.with_decision(temperature=0.5)
    images = example_images(calibrated, 32, seed=4)
    nchw = images.permute(0, 3, 1, 2).contiguous()
    plain = load_artifact(trained.ckpt, spec=calibrated).predict_images(nchw)
    confidence = plain.max(1).values.sort().values
    threshold = (confidence[15] + confidence[16]).item() / 2  # half get the TTA, none on the edge
    spec = dataclasses.replace(calibrated, tta=TTA(flip=True, translate=1, threshold=threshold))
    path = export_format("onnx_e2e", trained.net, spec, tmp_path / "e2e.onnx")
    (probs,) = make_session(path).run(None, {INPUT_NAME: images.numpy()})
    expected = load_artifact(trained.ckpt, spec=spec).predict_images(nchw)
    torch.testing.assert_close(torch.from_numpy(probs), expected, atol=1e-5, rtol=1e-4)
    # Each part matters here: TTA on every image, or on none, or T = 1 answers otherwise.
    for other in (
        dict(tta=spec.tta.with_threshold(None)),
        dict(tta=TTA()),
        dict(task={**spec.task, "temperature": 1.0}),
    ):
        changed = load_artifact(trained.ckpt, spec=dataclasses.replace(spec, **other))
        assert not torch.allclose(changed.predict_images(nchw), expected, atol=1e-4), other
