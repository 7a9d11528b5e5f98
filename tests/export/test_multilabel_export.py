"""Exports of a multi-label model: task and threshold travel, sigmoids, the INT8 gate on mAP."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers.hydra_configs import compose
from lightning_cls.data.multilabel import MultiLabelDataModule
from lightning_cls.inference import load_artifact


def test_onnx_export_carries_the_task_and_threshold_and_matches_the_checkpoint(
    multilabel_run, multilabel_squares
):
    onnx = load_artifact(Path(multilabel_run["run_dir"]) / "export" / "model.onnx")
    ckpt = load_artifact(multilabel_run["best_ckpt"])
    assert (onnx.spec.task["name"], onnx.spec.decision.threshold) == (
        "multilabel",
        ckpt.spec.decision.threshold,
    )
    data = MultiLabelDataModule(str(multilabel_squares))
    data.setup()
    images = data.splits["test"].images[:16]
    p_onnx, p_ckpt = onnx.predict_images(images), ckpt.predict_images(images)
    torch.testing.assert_close(p_onnx, p_ckpt, atol=1e-4, rtol=1e-3)
    # independent sigmoids, not a softmax: rows do not sum to one
    logits = ckpt.logits(ckpt.spec.preprocess(images))
    torch.testing.assert_close(p_ckpt, logits.sigmoid(), atol=1e-5, rtol=1e-4)
    assert not torch.allclose(p_ckpt.sum(1), torch.ones(16), atol=1e-2)


def test_end_to_end_onnx_ends_in_a_sigmoid(multilabel_run, tmp_path):
    from lightning_cls.export import export_format
    from lightning_cls.inference import load_torch_model

    net, spec = load_torch_model(multilabel_run["best_ckpt"])
    # the export checks the file against Predictor (sigmoid) at several batch sizes
    path = export_format("onnx_e2e", net, spec, tmp_path / "e2e.onnx")
    with pytest.raises(ValueError, match="end-to-end"):  # raw pixels in: not a Predictor input
        load_artifact(path)


def test_int8_export_gates_a_multilabel_model_on_val_map(
    multilabel_run, multilabel_squares, tmp_path
):
    from lightning_cls.export.__main__ import export

    cfg = compose(
        "export",
        [
            f"ckpt_path={multilabel_run['best_ckpt']}",
            "export=int8",
            "data=multilabel",
            f"data.root={multilabel_squares}",
        ],
        tmp=tmp_path,
    )
    result = export(cfg)
    report = next(r for r in result.reports if r.method == "onnx_static_int8")
    assert report.metric == "mAP" and report.accepted
    assert report.acc_before == pytest.approx(
        multilabel_run["best_val_acc"], abs=1e-4
    )  # the best val mAP
    int8 = load_artifact(result.paths["onnx_int8"])
    assert (int8.spec.task["name"], int8.spec.decision.threshold) == (
        "multilabel",
        load_artifact(multilabel_run["best_ckpt"]).spec.decision.threshold,
    )
