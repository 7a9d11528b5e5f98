"""Trust flags take a real boolean (``inference/flags.py``): Hydra hands ``trust_artifact=no``
over as the string "no", and ``bool("no")`` is true; predict must refuse it, never load the
TorchScript file it names."""

from __future__ import annotations

import re

import pytest
import torch

from helpers import png_bytes
from helpers.hydra_configs import compose
from lightning_cls.inference.flags import check_trust_flag
from lightning_cls.inference.runtimes import UntrustedArtifactError, refuse_untrusted
from lightning_cls.predict import predict

# What a command line gives for each (Hydra's parsing, pinned below): none of them is a boolean.
NOT_BOOLEANS = {
    "trust_artifact=no": "no",
    "trust_artifact=off": "off",
    "trust_artifact='false'": "false",
    "trust_artifact='true'": "true",
    "trust_artifact=yes": "yes",
    "trust_artifact=1": 1,
    "trust_artifact=0": 0,
    "trust_artifact=null": None,
}


def _refusal(key: str, value) -> str:
    return (
        rf"^{re.escape(key)}={re.escape(repr(value))} is not a boolean; .* set "
        rf"{re.escape(key)}=true \(you trust its source\) or {re.escape(key)}=false\.$"
    )


@pytest.mark.parametrize("value", list(NOT_BOOLEANS.values()), ids=repr)
def test_a_flag_that_is_not_a_boolean_is_refused_naming_key_value_and_fix(value):
    with pytest.raises(TypeError, match=_refusal("serve.trust_artifact", value)):
        check_trust_flag("serve.trust_artifact", value)


def test_true_and_false_are_the_only_flags():
    assert check_trust_flag("trust_artifact", True) is True
    assert check_trust_flag("trust_artifact", False) is False


def test_hydra_parses_these_overrides_to_non_booleans():
    """Why the rule exists: each override reaches the command as a string or a number."""
    for override, value in NOT_BOOLEANS.items():
        cfg = compose("predict", ["ckpt_path=m.onnx", "inputs=x", override])
        assert cfg.trust_artifact == value and type(cfg.trust_artifact) is type(value), override
    trusted = compose("predict", ["ckpt_path=m.onnx", "inputs=x", "trust_artifact=true"])
    assert trusted.trust_artifact is True


def test_the_runtimes_gate_uses_the_same_rule():
    """``refuse_untrusted`` (every loader's gate): a non-boolean is no trust, and it says why."""
    for value in NOT_BOOLEANS.values():
        with pytest.raises(UntrustedArtifactError, match=r"trust_artifact=.* is not a boolean; "):
            refuse_untrusted("m.pt2", "pt2", value)
    with pytest.raises(UntrustedArtifactError, match=r"^Refusing to load m\.pt2: a pt2 file"):
        refuse_untrusted("m.pt2", "pt2", False)
    refuse_untrusted("m.pt2", "pt2", True)  # trusted: no error


@pytest.fixture
def jit_loads(monkeypatch) -> list[str]:
    """Every ``torch.jit.load`` call of the test (the file still loads)."""
    calls, load = [], torch.jit.load
    monkeypatch.setattr(torch.jit, "load", lambda f, *a, **k: calls.append(str(f)) or load(f, *a, **k))  # fmt: skip
    return calls


def _predict_cfg(artifacts, tmp_path, override: str):
    image = tmp_path / "image.png"
    image.write_bytes(png_bytes(artifacts.images[0]))
    args = [f"ckpt_path={artifacts.paths['torchscript']}", f"inputs={image}"]
    return compose("predict", [*args, f"output={tmp_path}/p.csv", "device=cpu", override], tmp_path)


@pytest.mark.parametrize("override", sorted(NOT_BOOLEANS))
def test_predict_never_loads_torchscript_on_a_flag_that_only_looks_true(
    override, artifacts, tmp_path, jit_loads
):
    cfg = _predict_cfg(artifacts, tmp_path, override)
    with pytest.raises(TypeError, match=_refusal("trust_artifact", NOT_BOOLEANS[override])):
        predict(cfg)
    assert jit_loads == [] and not (tmp_path / "p.csv").exists()


def test_predict_loads_torchscript_with_trust_artifact_true(artifacts, tmp_path, jit_loads):
    """The control: the spy above sees a load when there is one."""
    rows = predict(_predict_cfg(artifacts, tmp_path, "trust_artifact=true"))
    assert jit_loads == [str(artifacts.paths["torchscript"])] and len(rows) == 1
    assert (tmp_path / "p.csv").exists()


def test_predict_cli_refuses_trust_artifact_no_in_one_line(artifacts, tmp_path, user_command):
    argv = ["-m", "lightning_cls.predict", f"ckpt_path={artifacts.paths['torchscript']}"]
    argv += [f"inputs={tmp_path}", "trust_artifact=no", f"hydra.run.dir={tmp_path}/run"]
    out = user_command(argv, tmp_path)
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.returncode == 1 and len(errors) == 1, out.stderr[-2000:]
    assert errors[0] == "error: " + check_message("trust_artifact", "no")
    assert "Traceback" not in out.stderr


def check_message(key: str, value) -> str:
    with pytest.raises(TypeError) as refused:
        check_trust_flag(key, value)
    return str(refused.value)
