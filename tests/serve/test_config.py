"""ServeConfig checks (fast, no server) and a Hydra-free serving library."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from lightning_cls.inference.threads import available_cores
from lightning_cls.serve import ServeConfig


def test_thread_budget_is_cores_over_workers_and_never_oversubscribed():
    cores = available_cores()
    assert ServeConfig(artifact="m.onnx").threads == cores
    assert ServeConfig(artifact="m.onnx", workers=cores + 1).threads == 1
    with pytest.raises(ValueError, match=rf"oversubscribes the {cores} available cores"):
        ServeConfig(artifact="m.onnx", threads=cores, workers=2)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"host": "example.com"}, r"serve\.host='example\.com'; use one of 127\.0\.0\.1"),
        ({"port": 80}, r"serve\.port=80 must be in 1024\.\.65535"),
        ({"max_queue": 0}, r"serve\.max_queue=0 must be an integer >= 1"),
        ({"batch_timeout": 20.0}, r"batch_timeout=20\.0 must be >= 0 and below serve\.timeout"),
        ({"engine": "litserve"}, r"serve\.engine='litserve'; use one of asgi \(LitServe was"),
        ({"max_pixels": 0}, r"serve\.max_pixels=0 must be an integer >= 1"),
        ({"drain_s": 0}, r"serve\.drain_s=0 must be > 0 seconds"),
        ({"max_request_pixels": 0}, r"serve\.max_request_pixels=0 must be an integer >= 1"),
        ({"max_connections": 0}, r"serve\.max_connections=0 must be an integer >= 1"),
        ({"header_timeout_s": 0}, r"serve\.header_timeout_s=0 must be > 0 seconds"),
        ({"keep_alive_s": -1}, r"serve\.keep_alive_s=-1 must be > 0 seconds"),
        ({"workers": 65}, r"serve\.workers=65 exceeds 64"),
    ],
)
def test_bad_settings_name_the_key_and_the_fix(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ServeConfig(artifact="m.onnx", **kwargs)


def test_default_binds_localhost_only():
    assert ServeConfig(artifact="m.onnx").host == "127.0.0.1"


def test_serving_library_imports_neither_hydra_nor_lightning():
    code = (
        "import sys, lightning_cls.serve\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pytorch_lightning', 'hydra', 'omegaconf')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_cli_user_error_is_one_line_and_exit_1(tmp_path, user_command):
    argv = ["-m", "lightning_cls.serve", f"ckpt_path={tmp_path}/missing.onnx"]
    out = user_command([*argv, f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert out.returncode == 1
    assert "Model artifact not found" in out.stderr and "Traceback" not in out.stderr


def test_cli_refuses_an_untrusted_pt2_naming_the_key_predict_uses(
    artifacts, tmp_path, user_command
):
    argv = ["-m", "lightning_cls.serve", f"ckpt_path={artifacts.paths['pt2']}"]
    out = user_command([*argv, f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert out.returncode == 1, out.stderr[-2000:]
    assert "can run arbitrary code" in out.stderr and "pass trust_artifact=true" in out.stderr
    assert "serve.trust_artifact" not in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("value", ["no", "off", "false", "true", 1, 0, None], ids=repr)
def test_trust_artifact_takes_a_real_boolean_only(value):
    """``trust_artifact=no`` reaches ServeConfig as the string "no" (Hydra): refused."""
    message = (
        rf"^trust_artifact={re.escape(repr(value))} is not a boolean; .* set "
        r"trust_artifact=true \(you trust its source\) or trust_artifact=false\.$"
    )
    with pytest.raises(TypeError, match=message):
        ServeConfig(artifact="m.pt2", trust_artifact=value)
    assert ServeConfig(artifact="m.pt2", trust_artifact=True).trust_artifact is True


def test_cli_refuses_trust_artifact_no_in_one_line(artifacts, tmp_path, user_command):
    argv = ["-m", "lightning_cls.serve", f"ckpt_path={artifacts.paths['pt2']}"]
    argv += ["trust_artifact=no", f"hydra.run.dir={tmp_path}/run"]
    out = user_command(argv, tmp_path)
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.returncode == 1 and len(errors) == 1, out.stderr[-2000:]
    assert errors[0].startswith("error: trust_artifact='no' is not a boolean;"), errors
    assert "Traceback" not in out.stderr
