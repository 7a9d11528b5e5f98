"""INT8 calibration refuses data with other classes than the model (the one check_same_data)."""

from __future__ import annotations

import pytest

from helpers import LEARNABLE, make_data
from lightning_cls.export.exporter import ExportConfig, export_model


def test_int8_calibration_on_other_classes_is_refused(trained, tmp_path):
    config = ExportConfig(formats=["onnx", "onnx_int8"])
    other = make_data(LEARNABLE, num_classes=5)
    with pytest.raises(
        ValueError,
        match=r"The model being exported was trained on other data: "
        r"classes differ \(4 classes vs 5 in data=.*only in data=.*\[class_4\]",
    ):
        export_model(trained.net, trained.spec, tmp_path, config, other)
    assert not (tmp_path / "model_int8.onnx").exists()
