"""Artifacts are code and metadata is input: what a stranger's file can and cannot do.

- ``.pt2``/TorchScript can run code when loaded: refused unless ``trust_artifact``, on every
  public way in (``load_artifact``, ``open_runtime``, ``runtime_for(path)(path)``,
  ``RUNTIMES[suffix](path)``, ``load_torch_model``, ``load_torchscript``).
- The spec an artifact carries (or ``+spec.`` overrides) is checked against the model before
  use: one ``ValueError`` naming the field and the fix, never NaN probabilities, an
  ``IndexError`` or an ONNX Runtime error at the first batch.
- Corrupt files are one line naming the file.
- ``predict`` reads only regular files: a FIFO named ``*.png`` is a failure row, not a hang.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import threading
import time
import zipfile
from pathlib import Path

import pytest
import torch

from lightning_cls.export.torchscript import load_torchscript
from lightning_cls.inference import RUNTIMES, UntrustedArtifactError, load_artifact, runtime_for
from lightning_cls.inference.images import load_image_batch
from lightning_cls.inference.runtimes import open_runtime
from lightning_cls.inference.torch_models import load_torch_model


class _MakeDir:
    """Unpickling this creates a folder: the stand-in for any code a crafted file runs."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (os.makedirs, (self.path,))


def crafted_pt2(source: Path, dst: Path, marker: Path) -> Path:
    """A copy of ``source`` whose first weight is a pickle that creates ``marker`` on load."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(dst, "w") as out:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith("data/weights/model_weights_config.json"):
                config = json.loads(data)
                for entry in config["config"].values():
                    entry["use_pickle"] = True  # torch.export.load: torch.load(weights_only=False)
                data = json.dumps(config).encode()
            elif info.filename.endswith("data/weights/weight_0"):
                data = pickle.dumps(_MakeDir(marker))
            out.writestr(info, data)
    return dst


def test_crafted_pt2_is_refused_unless_trusted_and_would_run_code(artifacts, tmp_path):
    marker = tmp_path / "code_ran"
    evil = crafted_pt2(artifacts.paths["pt2"], tmp_path / "evil.pt2", marker)
    with pytest.raises(
        UntrustedArtifactError,
        match=r"Refusing to load .*evil\.pt2: a pt2 file can run arbitrary code .*"
        r"trust_artifact=true.*export=onnx",
    ):
        load_artifact(evil)
    assert not marker.exists()
    # What the refusal prevents: torch.export.load runs the file's pickle (PyTorch 2.14).
    with pytest.raises(ValueError, match=r"Cannot read .*evil\.pt2 as a torch\.export \.pt2"):
        load_artifact(evil, trust_artifact=True)
    assert marker.is_dir()


@pytest.mark.parametrize("kind", ["pt2", "torchscript"])
def test_code_carrying_kinds_need_trust_and_then_load(artifacts, kind):
    with pytest.raises(UntrustedArtifactError, match=rf"a {kind} file can run arbitrary code"):
        load_artifact(artifacts.paths[kind])
    trusted = load_artifact(artifacts.paths[kind], trust_artifact=True)
    assert trusted.spec.classes == artifacts.spec.classes


def test_torchscript_in_a_pt_suffix_is_refused_too(artifacts, tmp_path):
    disguised = tmp_path / "model_weights.pt"
    disguised.write_bytes(artifacts.paths["torchscript"].read_bytes())
    with pytest.raises(UntrustedArtifactError, match=r"model_weights\.pt: a torchscript file"):
        load_artifact(disguised)


# Every public way to turn a path into a loaded model; each must refuse code without trust.
LOADERS = {
    "load_artifact": lambda path, **kw: load_artifact(path, **kw),
    "open_runtime": lambda path, **kw: open_runtime(path, **kw),
    "runtime_for(path)(path)": lambda path, **kw: runtime_for(path)(path, **kw),
    "RUNTIMES[suffix](path)": lambda path, **kw: RUNTIMES[path.suffix](path, **kw),
}
REFUSAL = r"Refusing to load .*evil\.pt2: a pt2 file can run arbitrary code.*trust_artifact=true"


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_every_public_loader_refuses_a_crafted_pt2_before_it_runs(artifacts, tmp_path, loader):
    marker = tmp_path / "code_ran"
    evil = crafted_pt2(artifacts.paths["pt2"], tmp_path / "evil.pt2", marker)
    load = LOADERS[loader]
    for untrusted in ({}, {"trust_artifact": False}, {"trust_artifact": "true"}):
        with pytest.raises(UntrustedArtifactError, match=REFUSAL):
            load(evil, **untrusted)
    assert not marker.exists(), f"{loader} ran the file's code"
    with pytest.raises(ValueError, match=r"Cannot read .*evil\.pt2 as a torch\.export \.pt2"):
        load(evil, trust_artifact=True)
    assert marker.is_dir()  # trusted, the same call does open the file


@pytest.mark.parametrize("loader", sorted(LOADERS))
@pytest.mark.parametrize("kind", ["pt2", "torchscript"])
def test_every_public_loader_needs_trust_and_then_loads(artifacts, loader, kind):
    path = artifacts.paths[kind]
    with pytest.raises(UntrustedArtifactError, match=rf"{path.name}: a {kind} file can run"):
        LOADERS[loader](path)
    trusted = LOADERS[loader](path, trust_artifact=True)
    assert trusted.spec.classes == artifacts.spec.classes


def test_torchscript_behind_a_weights_suffix_is_refused_on_every_path(artifacts, tmp_path):
    disguised = tmp_path / "model_weights.pt"
    disguised.write_bytes(artifacts.paths["torchscript"].read_bytes())
    for name in ("open_runtime", "runtime_for(path)(path)"):
        with pytest.raises(UntrustedArtifactError, match=r"model_weights\.pt: a torchscript"):
            LOADERS[name](disguised)
    # The weights loaders never run code: they refuse it even when told to trust it.
    refusal = r"Refusing to read .*model_weights\.pt as weights: it is a TorchScript archive"
    with pytest.raises(UntrustedArtifactError, match=refusal + r".*trust_artifact=True"):
        RUNTIMES[".pt"](disguised)
    with pytest.raises(UntrustedArtifactError, match=refusal):
        load_torch_model(disguised)


def test_load_torchscript_needs_trust(artifacts):
    path = artifacts.paths["torchscript"]
    with pytest.raises(UntrustedArtifactError, match=r"a torchscript file can run arbitrary"):
        load_torchscript(path)
    module, spec = load_torchscript(path, trust_artifact=True)
    assert spec.classes == artifacts.spec.classes


def _onnx_with_props(source: Path, dst: Path, **props) -> Path:
    import onnx

    model = onnx.load(str(source))
    for entry in model.metadata_props:
        if entry.key in props:
            entry.value = json.dumps(props[entry.key])
    onnx.save(model, str(dst))
    return dst


@pytest.mark.parametrize(
    ("props", "match"),
    [
        ({"std": [0.25, 0.0, 0.25]}, r"std=\[0\.25, 0\.0, 0\.25\] holds a value that is not a pos"),
        ({"std": [-1.0, 1.0, 1.0]}, r"std=\[-1\.0, 1\.0, 1\.0\] holds a value"),
        ({"std": [0.25, 0.25]}, r"std=\[0\.25, 0\.25\] has 2 values but num_channels=3"),
        ({"mean": [0.5]}, r"mean=\[0\.5\] has 1 values but num_channels=3"),
        ({"classes": ["a", "b"]}, r"outputs 3 logits per image but its spec names 2 classes"),
        ({"classes": ["a", "b", "c", "d"]}, r"outputs 3 logits .* names 4 classes"),
        ({"image_size": 20}, r"takes 12x12 images but its spec says image_size=20"),
        ({"num_channels": 1, "mean": [0.5], "std": [0.5]}, r"takes 3-channel images but .*=1"),
    ],
)
def test_bad_metadata_in_an_onnx_file_is_one_error_naming_the_field(
    artifacts, tmp_path, props, match
):
    bad = _onnx_with_props(artifacts.paths["onnx"], tmp_path / "bad.onnx", **props)
    field = next(iter(props)) if "num_channels" not in props else "num_channels"
    hint = rf"\+spec\.{field}="
    with pytest.raises(ValueError, match=match) as err:
        load_artifact(bad)
    assert "bad.onnx" in str(err.value) and ("\n" not in str(err.value))
    assert re.search(hint, str(err.value)), str(err.value)
    # The override named in the message repairs it.
    fixed = load_artifact(bad, spec={k: artifacts.spec.to_dict()[k] for k in props})
    probs = fixed.predict_images(artifacts.images[:4])
    assert torch.isfinite(probs).all() and probs.shape == (4, 3)


def test_bad_overrides_are_checked_like_stored_metadata(artifacts):
    with pytest.raises(ValueError, match=r"std=\[0\.0, 0\.0, 0\.0\] .*\+spec\.std="):
        load_artifact(artifacts.paths["onnx"], spec={"std": [0.0, 0.0, 0.0]})
    with pytest.raises(
        ValueError,
        match=r"trained with classes=.* override classes=\[.a., .b.\].*\+spec\.classes=\[\.\.\.\] with 3 names",
    ):
        load_artifact(artifacts.paths["ckpt"], spec={"classes": ["a", "b"]})
    with pytest.raises(ValueError, match=r"image_size='big' is not an integer"):
        load_artifact(artifacts.paths["onnx"], spec={"image_size": "big"})
    with pytest.raises(ValueError, match=r"classes='cat' is not a list of class names"):
        load_artifact(artifacts.paths["onnx"], spec={"classes": "cat"})


def test_torch_kinds_are_checked_with_a_dry_batch(artifacts):
    # The traced TorchScript file has no declared shapes; the dry batch finds the mismatch.
    with pytest.raises(ValueError, match=r"model_trace\.torchscript outputs 3 logits .* 5 classes"):
        load_artifact(
            artifacts.paths["torchscript"], spec={"classes": list("abcde")}, trust_artifact=True
        )
    with pytest.raises(ValueError, match=r"does not accept a batch of shape \(1, 3, 20, 20\)"):
        load_artifact(artifacts.paths["pt2"], spec={"image_size": 20}, trust_artifact=True)


def test_unparsable_metadata_value_names_the_key(artifacts, tmp_path):
    import onnx

    model = onnx.load(str(artifacts.paths["onnx"]))
    for entry in model.metadata_props:
        if entry.key == "mean":
            entry.value = "[0.5, 0.5,"
    onnx.save(model, str(tmp_path / "cut.onnx"))
    with pytest.raises(ValueError, match=r"cut\.onnx \(metadata_props\): mean='\[0\.5.* not JSON"):
        load_artifact(tmp_path / "cut.onnx")


@pytest.mark.parametrize(
    ("kind", "suffix", "what"),
    [
        ("onnx", ".onnx", "an ONNX model"),
        ("pt2", ".pt2", r"a torch\.export \.pt2 program"),
        ("torchscript", ".torchscript", "a TorchScript archive"),
    ],
)
def test_corrupt_files_are_one_line_naming_the_file(artifacts, tmp_path, kind, suffix, what):
    for name, data in (
        ("garbage", b"this is not a model at all"),
        ("truncated", artifacts.paths[kind].read_bytes()[:300]),
    ):
        path = tmp_path / f"{name}{suffix}"
        path.write_bytes(data)
        with pytest.raises(ValueError, match=rf"Cannot read .*{name}\{suffix} as {what}") as err:
            load_artifact(path, trust_artifact=True)
        assert "\n" not in str(err.value)


def _open_write_end_after(fifo: Path, seconds: float) -> threading.Thread:
    """Unblock a reader stuck in open() on ``fifo`` (the old behaviour) after ``seconds``."""

    def unblock():
        time.sleep(seconds)
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # no reader waiting: nothing was blocked
            pass

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    return thread


def test_a_fifo_named_png_is_a_failure_row_not_a_hang(tmp_path):
    fifo = tmp_path / "stuck.png"
    os.mkfifo(fifo)
    (tmp_path / "folder.png").mkdir()
    guard = _open_write_end_after(fifo, 5.0)  # the timeout: a blocked read ends after 5 s
    start = time.perf_counter()
    images, ok, failed = load_image_batch([fifo, tmp_path / "folder.png"], 8, 3)
    assert time.perf_counter() - start < 4.0, "the FIFO was opened (and blocked)"
    assert ok == [] and images.shape == (0, 3, 8, 8)
    assert failed == [
        (fifo, "not a regular file (a FIFO); skipped"),
        (tmp_path / "folder.png", "not a regular file (a folder); skipped"),
    ]
    guard.join()
