"""ONNX: dynamic batch, parity in ONNX Runtime, metadata round trip, loud mismatch."""

from __future__ import annotations

import re

import onnx
import pytest
import torch

from lightning_cls.export import export_format
from lightning_cls.export import writer as writer_module
from lightning_cls.export.checks import example_batch
from lightning_cls.export.errors import ExportCheckError
from lightning_cls.export.onnx import (
    INPUT_NAME,
    OPSET,
    make_session,
    read_metadata,
    run_session,
)
from lightning_cls.inference import InputSpec


class _ExportsDifferently(torch.nn.Module):
    """Eager: ``net``; while torch.export traces it: ``net`` with doubled logits."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        logits = self.net(x)
        return logits * 2 if torch.compiler.is_exporting() else logits


def test_onnx_parity_at_two_batch_sizes(trained, tmp_path):
    path = export_format(
        "onnx", trained.net, trained.spec, tmp_path / "m.onnx", check_batch_sizes=(1, 7)
    )
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # no external-data side file
    model = onnx.load(str(path))
    assert {o.domain: o.version for o in model.opset_import}[""] == OPSET
    (inp,) = model.graph.input
    assert inp.name == INPUT_NAME
    assert inp.type.tensor_type.shape.dim[0].dim_param == "batch"
    session = make_session(path)
    for batch_size in (1, 7):
        x = example_batch(trained.spec, batch_size, seed=batch_size)
        with torch.no_grad():
            expected = trained.net(x)
        torch.testing.assert_close(run_session(session, x), expected, atol=1e-4, rtol=1e-3)


def test_export_logs_what_its_check_compared(trained, tmp_path, caplog):
    caplog.set_level("INFO", logger="lightning_cls.export.writer")
    export_format("onnx", trained.net, trained.spec, tmp_path / "m.onnx", check_batch_sizes=(1, 7))
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Exported")]
    match = re.search(
        r"checked: ONNX vs eager PyTorch at batch 1 and 7, max abs diff (\S+)\)$", line
    )
    assert match, line
    assert 0 <= float(match.group(1)) < 1e-4  # the diff the check measured, not a constant


def test_onnx_metadata_round_trip(trained, tmp_path):
    path = export_format(
        "onnx", trained.net, trained.spec, tmp_path / "m.onnx", check_batch_sizes=()
    )
    meta = read_metadata(path)
    assert meta == trained.spec
    assert meta.classes == ("class_0", "class_1", "class_2", "class_3")
    assert meta.mean == (0.5, 0.5, 0.5) and meta.image_size == 16 and meta.channel_order == "RGB"
    props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    assert props["classes"] == '["class_0", "class_1", "class_2", "class_3"]'  # plain JSON


def test_parity_check_fails_loudly_when_the_file_computes_something_else(trained, tmp_path):
    with pytest.raises(
        ExportCheckError, match=r"ONNX m\.onnx at batch 1: outputs differ from eager PyTorch"
    ):
        export_format("onnx", _ExportsDifferently(trained.net), trained.spec, tmp_path / "m.onnx")
    assert list(tmp_path.iterdir()) == []  # checked under a temp name, which is gone


def test_failed_parity_check_keeps_the_previous_file(trained, tmp_path, monkeypatch):
    path = export_format(
        "onnx", trained.net, trained.spec, tmp_path / "m.onnx", check_batch_sizes=()
    )
    before = path.read_bytes()
    seen = []

    def fail(expected, actual, atol, rtol, what):  # the new file is "wrong"
        seen.append(what)
        raise ExportCheckError(f"{what}: outputs differ from eager PyTorch")

    monkeypatch.setattr(writer_module, "check_outputs_close", fail)
    with pytest.raises(ExportCheckError, match=r"ONNX m\.onnx at batch 1: outputs differ"):
        export_format("onnx", trained.net, trained.spec, path, check_batch_sizes=(1,))
    assert seen == ["ONNX m.onnx at batch 1"]  # the final name, not the temp file's
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # no temp file left behind


def test_meta_rejects_wrong_channel_count():
    with pytest.raises(ValueError, match=r"mean=\[0\.5\] has 1 values but num_channels=3"):
        InputSpec(classes=["a", "b"], mean=[0.5], std=[0.2, 0.2, 0.2], image_size=8, num_channels=3)
