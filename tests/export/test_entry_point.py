"""``python -m lightning_cls.export`` with the real configs; the callback at the end of fit."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from helpers import TRAINED_OVERRIDES as SYNTHETIC  # the `trained` fixture's data
from lightning_cls.export import ExportConfig
from lightning_cls.export.__main__ import export
from lightning_cls.export.callback import ExportCallback
from lightning_cls.export.checks import example_batch
from lightning_cls.export.exporter import export_model
from lightning_cls.inference import InputSpec, load_artifact, load_torch_model


def test_export_all_from_a_checkpoint(trained, helpers, tmp_path, monkeypatch):
    # The on-device formats export=all adds where installed: tests/export/test_on_device.py.
    monkeypatch.setattr("lightning_cls.export.exporter.ALL_IF_INSTALLED", ())
    cfg = helpers.compose(
        [
            f"ckpt_path={trained.ckpt}",
            "export=all",
            "export.torchscript.modes=[trace]",
            "export.onnx.opset=17",
            f"output_dir={tmp_path}/out",
        ],
        tmp_path,
    )
    paths = export(cfg).paths
    assert sorted(paths) == ["onnx", "pt2", "torchscript_trace"]
    import onnx

    model = onnx.load(str(paths["onnx"]))
    assert {o.domain: o.version for o in model.opset_import}[""] == 17  # its own option
    x = example_batch(trained.spec, 4)
    with torch.no_grad():
        expected = trained.net(x)
    for path in paths.values():
        predictor = load_artifact(path, trust_artifact=True)
        assert predictor.spec == trained.spec
        torch.testing.assert_close(predictor.logits(x), expected, atol=1e-4, rtol=1e-3)


def test_export_none_is_an_error(trained, helpers, tmp_path):
    cfg = helpers.compose([f"ckpt_path={trained.ckpt}", "export=none"], tmp_path)
    with pytest.raises(ValueError, match="Nothing to export: export=none"):
        export(cfg)


def _run_cli(server, env: dict, args: list[str], tmp_path) -> subprocess.CompletedProcess:
    """``python -m lightning_cls.export ARGS`` as typed, forked from the pre-imported server
    (tests/conftest.py): same exit code and output as a fresh interpreter, without its imports."""
    argv = ["-m", "lightning_cls.export", f"paths.root_dir={tmp_path}", *args]
    return server.run(argv, tmp_path, env, timeout=300)


def test_cli_torchscript_and_pt2_run_without_onnx_installed(trained, helpers, tmp_path):
    # sys.modules[name] = None makes "import name" fail, as if the export extra were missing.
    code = (
        "import runpy, sys; sys.modules['onnx'] = sys.modules['onnxruntime'] = None; "
        "runpy.run_module('lightning_cls.export', run_name='__main__')"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(helpers.repo)}
    args = [
        f"paths.root_dir={tmp_path}",
        f"ckpt_path={trained.ckpt}",
        "export=torchscript",
        "export.formats=[torchscript,pt2]",
        "export.torchscript.modes=[trace]",
        f"output_dir={tmp_path}/out",
    ]
    cmd = [sys.executable, "-c", code, *args]
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "out" / "model_trace.torchscript").is_file()
    assert (tmp_path / "out" / "model.pt2").is_file()


def test_cli_int8_passes_then_fails_the_threshold_with_exit_1(
    trained, tmp_path, fork_server, fork_env
):
    common = [
        f"ckpt_path={trained.ckpt}",
        "export=int8",
        "export.formats=[onnx,onnx_int8]",
        "export.int8.latency_runs=3",
        *SYNTHETIC,
    ]
    ok = _run_cli(fork_server, fork_env, [*common, f"output_dir={tmp_path}/ok"], tmp_path)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert (tmp_path / "ok" / "model_int8.onnx").is_file()
    assert not (tmp_path / "ok" / "model_int8_dynamic.torchscript").exists()
    assert "deprecated" not in ok.stderr + ok.stdout
    # No int8 model can gain 100 points, so this threshold must fail.
    bad = _run_cli(
        fork_server,
        fork_env,
        [*common, "export.int8.max_acc_drop=-100", f"output_dir={tmp_path}/bad"],
        tmp_path,
    )
    assert bad.returncode == 1
    assert "INT8 ACCURACY CHECK FAILED" in bad.stderr + bad.stdout
    assert not (tmp_path / "bad" / "model_int8.onnx").exists()
    assert (tmp_path / "bad" / "model.onnx").is_file()  # fp32 export still delivered


def test_callback_exports_after_fit(helpers, tmp_path):
    data = helpers.make_data()
    module = helpers.make_module(data)
    callback = ExportCallback(ExportConfig(formats=["onnx", "pt2"]), dirpath=tmp_path / "export")
    helpers.fit(module, data, tmp_path, max_epochs=1, callbacks=[callback])
    assert sorted(callback.result.paths) == ["onnx", "pt2"]
    x = example_batch(InputSpec.from_hparams(module.hparams), 3)
    with torch.no_grad():
        expected = module.net.eval()(x)
    for path in callback.result.paths.values():
        torch.testing.assert_close(
            load_artifact(path, trust_artifact=True).logits(x), expected, atol=1e-4, rtol=1e-3
        )


def test_export_from_a_compiled_run(helpers, tmp_path):
    """Train one step with ``net.compile()``; the checkpoint exports like any other.

    The eager backend keeps this to seconds on a shared CPU; the checkpoint does not depend
    on the backend (inductor only changes the kernels, not the parameters).
    """
    data = helpers.make_data()
    module = helpers.make_module(data)
    module.net.compile(backend="eager")
    ckpt = helpers.fit(
        module, data, tmp_path, max_epochs=1, limit_train_batches=1, limit_val_batches=1
    )
    net, meta = load_torch_model(ckpt)
    paths = export_model(
        net, meta, tmp_path / "export", ExportConfig(formats=["onnx", "pt2"])
    ).paths
    x = example_batch(meta, 5)
    with torch.no_grad():
        expected = module.net.eval()(x)
    for path in paths.values():
        torch.testing.assert_close(
            load_artifact(path, trust_artifact=True).logits(x), expected, atol=1e-4, rtol=1e-3
        )
