"""LiteRT's converter environment as ``make venv-litert`` lays it out (a venv whose ``.pth``
adds the project's site-packages, where an editable install's own hook does not run), used
from a folder outside the checkout: it imports this lightning_cls, and what it lacks is one
line naming the module and ``make venv-litert`` (not a traceback)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

from lightning_cls.export import litert

PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


@pytest.fixture
def converter_env(tmp_path) -> Path:
    """``make venv-litert`` without litert-torch: a venv layered on this one by a ``.pth``."""
    if litert.converter_python() == sys.executable:
        pytest.skip("litert_torch imports here: the converter runs in this process")
    venv = tmp_path / "venv-litert"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    own = subprocess.run([python, "-c", PURELIB], capture_output=True, text=True, check=True)
    base = sysconfig.get_paths()["purelib"]
    (Path(own.stdout.strip()) / "_lightning_cls_base.pth").write_text(base + "\n")
    return python


def test_the_converter_environment_imports_lightning_cls_from_any_folder(
    converter_env, tmp_path, monkeypatch
):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not the checkout: `-c` code finds no lightning_cls in cwd
    monkeypatch.setenv("LITERT_PYTHON", str(converter_env))
    net, example = torch.nn.Flatten().eval(), torch.zeros(2, 1, 2, 2)
    message = (
        r"^LiteRT's converter environment \(.*venv-litert/bin/python\) cannot import what it "
        r"needs \(ModuleNotFoundError: No module named 'litert_torch'\): run `make venv-litert`"
    )
    with pytest.raises(ImportError, match=message):  # lightning_cls imported, litert-torch not
        litert.write_tflite(net, example, elsewhere / "model.tflite", spec=None)
    assert not list(elsewhere.iterdir())  # no half-written file


def test_the_converter_beside_the_checkout_is_found_from_any_folder(tmp_path, monkeypatch):
    if litert.converter_python() == sys.executable:
        pytest.skip("litert_torch imports here: the converter runs in this process")
    python = tmp_path / "checkout" / litert.DEFAULT_PYTHON
    python.parent.mkdir(parents=True)
    python.touch()
    monkeypatch.setattr(litert, "PACKAGE_ROOT", tmp_path / "checkout")
    monkeypatch.delenv("LITERT_PYTHON", raising=False)
    monkeypatch.chdir(tmp_path)
    assert litert.converter_python() == str(python)
    monkeypatch.setenv("LITERT_PYTHON", str(tmp_path / "nowhere"))
    assert litert.converter_python() is None  # the user's choice, even where it is missing
