"""TorchScript (trace and script) and torch.export ``.pt2``: reload, outputs, metadata."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lightning_cls.export import export_format
from lightning_cls.export import writer as writer_module
from lightning_cls.export.checks import example_batch
from lightning_cls.export.errors import ExportCheckError
from lightning_cls.export.exporter import ExportConfig, export_model
from lightning_cls.export.torchscript import load_torchscript, quiet_jit
from lightning_cls.inference.runtimes import Pt2Runtime
from lightning_cls.models import create_model


def test_torchscript_trace_reloads_with_same_outputs(trained, tmp_path):
    path = export_format("torchscript", trained.net, trained.spec, tmp_path / "m.torchscript")
    module, meta = load_torchscript(path, trust_artifact=True)
    assert meta == trained.spec
    x = example_batch(meta, 5, seed=3)
    with torch.no_grad(), quiet_jit():
        torch.testing.assert_close(module(x), trained.net(x))


def test_torchscript_script_reloads_with_same_outputs(trained, tmp_path):
    net = create_model("mlp", num_classes=4, in_channels=3, image_size=16, hidden=8).eval()
    path = export_format(
        "torchscript", net, trained.spec, tmp_path / "m.torchscript", mode="script"
    )
    module, meta = load_torchscript(path, trust_artifact=True)
    assert meta == trained.spec
    assert "forward" in module.code  # compiled from source, not a recorded trace
    x = example_batch(meta, 3, seed=4)
    with torch.no_grad(), quiet_jit():
        torch.testing.assert_close(module(x), net(x))


class _ImportInForward(nn.Module):
    def forward(self, x):
        import math  # TorchScript cannot compile imports

        return x * math.pi


def test_script_failure_names_the_fix(trained, tmp_path):
    with pytest.raises(ValueError, match=r"(?s)cannot compile _ImportInForward.*Use mode='trace'"):
        export_format(
            "torchscript",
            _ImportInForward(),
            trained.spec,
            tmp_path / "m.torchscript",
            mode="script",
        )


def test_torchscript_rejects_unknown_mode(trained, tmp_path):
    with pytest.raises(
        ValueError, match="Unknown TorchScript mode 'jit'; use one of trace, script"
    ):
        export_format(
            "torchscript", trained.net, trained.spec, tmp_path / "m.torchscript", mode="jit"
        )


def test_pt2_reloads_with_a_different_batch_size(trained, tmp_path):
    path = export_format(
        "pt2", trained.net, trained.spec, tmp_path / "m.pt2"
    )  # exported at batch 2
    runtime = Pt2Runtime(path, trust_artifact=True)
    module, meta = runtime.module, runtime.spec
    assert meta == trained.spec
    for batch_size in (1, 11):
        x = example_batch(meta, batch_size, seed=batch_size)
        with torch.no_grad():
            out = module(x)
            assert out.shape == (batch_size, 4)
            torch.testing.assert_close(out, trained.net(x))


def test_pt2_training_mode_is_restored(trained, tmp_path):
    net = trained.module.net
    net.train()
    try:
        export_format("pt2", net, trained.spec, tmp_path / "m.pt2")
        assert net.training
    finally:
        net.eval()


def _fail_check(*args, **kwargs):
    raise ExportCheckError("outputs differ from eager PyTorch")


@pytest.mark.parametrize("suffix", [".torchscript", ".pt2"])
def test_failed_check_keeps_the_previous_file(trained, tmp_path, monkeypatch, suffix):
    def export(path):
        if suffix == ".pt2":
            return export_format("pt2", trained.net, trained.spec, path, (1,))
        return export_format("torchscript", trained.net, trained.spec, path, (1,), mode="trace")

    path = export(tmp_path / f"m{suffix}")
    before = path.read_bytes()
    monkeypatch.setattr(
        writer_module, "check_outputs_close", _fail_check
    )  # the new file is "wrong"
    with pytest.raises(ExportCheckError, match="outputs differ from eager"):
        export(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left behind


def test_export_atol_rtol_reach_torchscript_and_pt2(trained, tmp_path, monkeypatch):
    checks = []

    def record(expected, actual, atol, rtol, what):
        checks.append((what, atol, rtol))
        return 0.0  # the largest difference, as check_outputs_close returns it

    monkeypatch.setattr(writer_module, "check_outputs_close", record)
    config = ExportConfig(
        formats=["torchscript", "pt2"],
        torchscript={"modes": ["trace"]},
        check_batch_sizes=[1],
        atol=0.5,
        rtol=0.25,
    )
    export_model(trained.net, trained.spec, tmp_path, config)
    assert checks == [
        ("TorchScript (trace) model_trace.torchscript at batch 1", 0.5, 0.25),
        ("torch.export model.pt2 at batch 1", 0.5, 0.25),
    ]
