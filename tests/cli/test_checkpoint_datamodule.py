"""The commands given a checkpoint build its DataModule through one prelude
(``lightning_cls.data.for_model.datamodule_for``, called by ``cli.run_config.checkpoint_datamodule``): the checkpoint's mean/std go into the
DataModule's constructor, so a source whose mean/std are read-only (``data=streaming``, read
from its ``dataset.json``) is evaluated and calibrated with the model's own preprocessing."""

from __future__ import annotations

import json

import pytest
import torch

from helpers.hydra_configs import QUIET_TRAINER, compose

pytest.importorskip("litdata")

from lightning_cls.calibrate import calibrate_checkpoint
from lightning_cls.data.chunks import write_streaming
from lightning_cls.eval import evaluate

# Other statistics than the model's (synthetic data's 0.5/0.5): were the stored ones used, the
# inputs would be shifted and scaled and the accuracy would differ.
STORED = {"mean": [0.1, 0.2, 0.3], "std": [0.9, 0.8, 0.7]}


@pytest.fixture(scope="module")
def chunks(trained, tmp_path_factory):
    """``trained``'s validation and test images as litdata chunks with other mean/std stored."""
    data = trained.data
    data.setup("fit")
    splits = {name: (data.splits[name].images, data.splits[name].labels) for name in data.splits}
    meta = {**trained.spec.to_dict(), **STORED}
    out = tmp_path_factory.mktemp("stream") / "chunks"
    return write_streaming(splits, meta, out, chunk_bytes="64kb", progress=False)


def _expected_acc(trained, split: str) -> float:
    images, labels = trained.data.splits[split].images, trained.data.splits[split].labels
    with torch.no_grad():
        logits = trained.net(trained.spec.preprocess(images))  # (N, K) the model's own mean/std
    return float((logits.argmax(1) == labels).float().mean())


def test_eval_data_streaming_uses_the_checkpoint_s_preprocessing(trained, chunks, tmp_path):
    cfg = compose(
        "eval",
        [
            f"ckpt_path={trained.ckpt}",
            "data=streaming",
            f"data.input_dir={chunks}",
            "data.batch_size=32",
            "prediction_mosaic=false",
            *QUIET_TRAINER[:4],
        ],
        tmp=tmp_path,
    )
    metrics = evaluate(cfg)
    assert metrics["test/acc"] == pytest.approx(_expected_acc(trained, "test"), abs=1e-6)
    assert _expected_acc(trained, "test") > 0.5  # the model learned: the comparison means something
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["test"]["test/acc"] == metrics["test/acc"]


def test_calibrate_data_streaming_fits_on_the_stored_validation(trained, chunks, tmp_path):
    cfg = compose(
        "calibrate",
        [f"ckpt_path={trained.ckpt}", "data=streaming", f"data.input_dir={chunks}"],
        tmp=tmp_path,
    )
    report = calibrate_checkpoint(cfg)
    calibration = report["calibration"]
    assert calibration["images"] == len(trained.data.splits["val"])
    assert (tmp_path / "run" / "calibrated.ckpt").is_file()
    # the stored validation and test splits, as the model sees them (its own preprocessing)
    assert calibration["val_accuracy_before"] == pytest.approx(
        _expected_acc(trained, "val"), abs=1e-5
    )
    assert calibration["test_accuracy_before"] == pytest.approx(
        _expected_acc(trained, "test"), abs=1e-5
    )
