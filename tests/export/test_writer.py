"""A new export format through the registry alone: a ``.npz`` of the state dict, its own runtime.

Nothing in ``exporter.py`` names it, yet ``export_model`` writes it through the skeleton: eval
mode, a hidden temp name in the same folder, read back through the runtime ``RUNTIMES`` has for
its suffix, compared with eager PyTorch, renamed into place; a failed check leaves nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses

import inplace_format
import numpy as np
import pytest
import torch

from lightning_cls.export import FORMATS, Writer, register_format, write_verified
from lightning_cls.export.checks import example_batch
from lightning_cls.export.errors import ExportCheckError
from lightning_cls.export.exporter import ExportConfig, export_model
from lightning_cls.fileio import is_temp_file
from lightning_cls.inference import load_artifact
from lightning_cls.inference.network import build_network
from lightning_cls.inference.runtimes import RUNTIMES, Runtime, register_runtime
from lightning_cls.inference.spec import InputSpec

SPEC_KEY = "__spec__"


class NpzRuntime(Runtime):
    """Rebuilds the network from the spec's model_name/model_kwargs and the saved arrays."""

    kind = "npz"

    def __init__(
        self, path, *, spec=None, threads=None, device="cpu", model_name=None, model_kwargs=None
    ):
        self.device = torch.device("cpu")
        with np.load(path) as archive:
            self.spec = InputSpec.from_json(str(archive[SPEC_KEY]))
            state = {k: torch.from_numpy(archive[k]) for k in archive.files if k != SPEC_KEY}
        self.net = build_network(self.spec.model_name, self.spec.model_kwargs, self.spec.classes)
        self.net.load_state_dict(state)
        self.net.eval()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class NpzWriter(Writer):
    key, file, title = "npz", "model.npz", "NumPy"

    def __init__(self):
        self.calls = []  # (temp path, net.training) of each write

    def write(self, net, example, tmp, spec):
        self.calls.append((tmp, net.training))
        arrays = {k: v.detach().cpu().numpy() for k, v in net.state_dict().items()}
        with open(tmp, "wb") as f:  # a file object: np.savez would append .npz to a name
            np.savez(f, **{SPEC_KEY: np.array(spec.to_json())}, **self.arrays(arrays))

    def arrays(self, arrays: dict) -> dict:
        return arrays


class ScaledNpzWriter(NpzWriter):
    """Writes every weight doubled: a file that does not compute what the model does."""

    def arrays(self, arrays):
        return {k: v * 2 if v.dtype.kind == "f" else v for k, v in arrays.items()}


@pytest.fixture
def npz_format():
    writers = {"npz": NpzWriter()}
    register_runtime(".npz", NpzRuntime)
    register_format("npz", lambda: writers["npz"])  # a builder: the same writer every time
    try:
        yield writers
    finally:
        FORMATS.pop("npz")
        RUNTIMES.pop(".npz")


def test_a_registered_format_is_exported_through_the_skeleton(trained, tmp_path, npz_format):
    net = trained.module.net
    net.train()  # the skeleton exports in eval mode and restores the mode
    try:
        result = export_model(net, trained.spec, tmp_path, ExportConfig(formats=["onnx", "npz"]))
        assert net.training
    finally:
        net.eval()
    path = tmp_path / "model.npz"
    assert result.paths["npz"] == path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json", "model.npz", "model.onnx"]
    ((tmp, training),) = npz_format["npz"].calls
    assert not training
    assert tmp.parent == tmp_path and is_temp_file(tmp) and tmp.suffix == ".npz"
    assert tmp.name != path.name and not tmp.exists()
    predictor = load_artifact(path)  # predict and the server find it through RUNTIMES
    assert predictor.kind == "npz" and predictor.spec == trained.spec
    x = example_batch(trained.spec, 3, seed=5)
    with torch.no_grad():
        torch.testing.assert_close(predictor.logits(x), trained.net(x))


def test_a_file_that_fails_the_readback_check_is_never_renamed(trained, tmp_path, npz_format):
    path = write_verified(NpzWriter(), trained.net, trained.spec, tmp_path / "model.npz")
    before = path.read_bytes()
    with pytest.raises(
        ExportCheckError, match=r"NumPy model\.npz at batch 1: outputs differ from eager PyTorch"
    ):
        write_verified(ScaledNpzWriter(), trained.net, trained.spec, path)
    assert path.read_bytes() == before  # the earlier file is left as it was
    npz_format["npz"] = ScaledNpzWriter()  # through export_model, into an empty folder
    out = tmp_path / "out"
    with pytest.raises(ExportCheckError, match=r"NumPy model\.npz at batch 1"):
        export_model(trained.net, trained.spec, out, ExportConfig(formats=["npz"]))
    assert sorted(p.name for p in out.iterdir()) == ["meta.json"]  # no file, no temp file


def test_a_spec_lost_on_the_way_fails_the_export(trained, tmp_path, npz_format):
    class ForgetsClasses(NpzWriter):
        def write(self, net, example, tmp, spec):
            super().write(
                net, example, tmp, dataclasses.replace(spec, classes=("a", "b", "c", "d"))
            )

    with pytest.raises(ValueError, match=r"The input spec did not survive the round trip"):
        write_verified(ForgetsClasses(), trained.net, trained.spec, tmp_path / "model.npz")
    assert list(tmp_path.iterdir()) == []


def test_the_registry_names_its_formats(npz_format):
    assert ExportConfig(formats=["npz"]).formats == ["npz"]
    with pytest.raises(
        ValueError,
        match=r"Unknown export format\(s\) \['npy'\]; use onnx, onnx_e2e, torchscript, pt2, "
        r"openvino, onnx_int8, torchscript_int8_dynamic, openvino_int8, litert_int8, triton, auto, "
        r"executorch, "
        r"litert, coreml, npz or "
        r"'all'\.",
    ):
        ExportConfig(formats=["npy"])
    with pytest.raises(ValueError, match="Export format name 'onnx' is already registered"):
        register_format("onnx", NpzWriter)


def _stat(path):
    """What a write under ``path``'s name would change: the entry, its size, time and bytes."""
    if not path.exists():
        return None
    stat = path.stat()
    return stat.st_ino, stat.st_size, stat.st_mtime_ns, path.read_bytes()


class Observed:
    """A writer whose final names (companions too) are compared with their sentinels right
    after ``write`` and while its file is read back."""

    def __init__(self, writer, files, seen):
        self.writer, self.files, self.seen = writer, files, seen

    def __getattr__(self, name):
        return getattr(self.writer, name)

    def unchanged(self, when):
        for path in self.files:
            assert _stat(path) == self.seen[path], f"{path.name} changed {when} (before the rename)"

    def write(self, net, example, tmp, spec):
        self.writer.write(net, example, tmp, spec)
        self.unchanged(f"in {type(self.writer).__name__}.write")

    def read_back(self, path):
        answer = self.writer.read_back(path)
        self.unchanged(f"in {type(self.writer).__name__}.read_back")
        return answer


@pytest.fixture
def write_observed(monkeypatch):
    """``write_observed(writer, net, spec, path)``: ``write_verified`` over sentinel files at
    the final names, each checked after ``write``, in ``read_back`` and as the skeleton's temp
    block ends (just before the rename), and replaced after it."""
    from lightning_cls.export import writer as skeleton

    real_temp_files, current = skeleton._temp_files, []

    @contextlib.contextmanager
    def observed_temp_files(files):
        with real_temp_files(files) as temps:
            yield temps
            current[-1].unchanged("by the end of the skeleton's checks")

    monkeypatch.setattr(skeleton, "_temp_files", observed_temp_files)

    def write(writer, net, spec, path):
        files = [path.with_suffix(s) for s in writer.companions] + [path]
        seen = {}
        for file in files:
            file.write_bytes(b"an earlier export, " + file.name.encode())
            seen[file] = _stat(file)
        current.append(Observed(writer, files, seen))
        write_verified(current[-1], net, spec, path, check_batch_sizes=(1, 2))
        for file in files:
            assert _stat(file) != seen[file], f"{file.name} was not replaced"

    return write


ON_DEVICE = ("executorch", "litert", "litert_int8", "coreml")


def test_no_builtin_writer_touches_its_final_names_before_the_rename(
    trained, tmp_path, write_observed
):
    """Every built-in format's writers export over an earlier export whose files are
    sentinels: until the rename each final name must be the same entry with the same bytes.
    A writer that writes, truncates, renames or deletes under a final name fails here at
    once, where the kill test needs a kill at the right moment. (Mutation checked by hand:
    ``Pt2Writer.write`` saving to ``tmp.parent / self.file`` first fails with ``model.pt2
    changed in Pt2Writer.write``.)"""
    from lightning_cls.export.writer import writers_of

    config, written, files = ExportConfig(formats=["onnx", "openvino"]), [], {}
    for name in FORMATS:  # in registration order: the ONNX file is there for OpenVINO
        if name in ON_DEVICE:
            continue  # their converters take seconds each: tests/export/test_on_device.py
        writers = writers_of(name, config)
        if any(w.needs_data or type(w).export is not Writer.export for w in writers):
            continue  # INT8 (tests/export/test_int8_gate.py), and the steps on written files
        for writer in writers:
            writer.bind(files, None)
            write_observed(writer, trained.net, trained.spec, tmp_path / writer.file)
            written.append(writer.file)
            files[writer.key] = tmp_path / writer.file
    assert written == [
        "model.onnx",
        "model_e2e.onnx",
        "model_trace.torchscript",
        "model_script.torchscript",
        "model.pt2",
        "model.xml",
    ]


def test_the_final_name_check_catches_a_writer_that_writes_in_place(
    trained, tmp_path, write_observed, monkeypatch
):
    """Negative control: the kill test's in-place writer, without its pauses."""
    monkeypatch.setattr(inplace_format, "PAUSE_S", 0.0)
    inplace_format.register()
    try:
        path = tmp_path / "model.inplace"
        with pytest.raises(AssertionError, match=r"model\.inplace changed in InPlaceWriter\.write"):
            write_observed(inplace_format.InPlaceWriter(), trained.net, trained.spec, path)
    finally:
        inplace_format.unregister()


def _tree(path):
    """A folder artifact's (Core ML's ``.mlpackage``) entry and every file's bytes under it."""
    if not path.is_dir():
        return _stat(path)
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return path.stat().st_ino, [(str(p.relative_to(path)), p.read_bytes()) for p in files]


def _observe_folder_writer(writer, net, spec, path, monkeypatch):
    """``writer.export`` (a folder artifact through ``fileio.atomic_dir``) over a sentinel
    folder at ``path``: unchanged after ``write`` and just before ``atomic_dir`` renames."""
    import lightning_cls.export.coreml as module

    path.mkdir()
    (path / "sentinel.txt").write_text("an earlier export")
    seen, real_dir, real_write = _tree(path), module.atomic_dir, writer.write

    def unchanged(when):
        assert _tree(path) == seen, f"{path.name} changed {when} (before the rename)"

    @contextlib.contextmanager
    def observed_dir(target):
        with real_dir(target) as tmp:
            yield tmp
            unchanged("by the end of the writer's checks")

    def write(*args):
        real_write(*args)
        unchanged(f"in {type(writer).__name__}.write")

    monkeypatch.setattr(module, "atomic_dir", observed_dir)
    monkeypatch.setattr(writer, "write", write)
    writer.export(net, spec, path)
    assert _tree(path) != seen, f"{path.name} was not replaced"


SOURCED = ["onnx_int8", "torchscript_int8_dynamic", "openvino_int8"]  # gated on the data


@pytest.mark.slow  # each converter takes seconds (ExecuTorch's XNNPACK lowering, Core ML, ...)
@pytest.mark.parametrize("name", [*ON_DEVICE, *SOURCED])
def test_no_on_device_or_int8_writer_touches_its_final_names_before_the_rename(
    trained, tmp_path, write_observed, monkeypatch, name
):
    """The writers the test above leaves out: the on-device formats (ExecuTorch ``.pte``,
    LiteRT, Core ML's ``.mlpackage`` folder) and the INT8 methods (gated on the trained model's
    data), each over sentinels at its final names, after the sources it is made from. A format
    this machine cannot write is skipped, naming why. (Mutation checked by hand:
    ``ExecuTorchWriter.write`` writing ``tmp.parent / self.file`` first fails with
    ``model.pte changed in ExecuTorchWriter.write``.)"""
    from lightning_cls.export.writer import ExportData

    reason = FORMATS.get(name).unavailable()
    if reason:
        pytest.skip(reason)
    int8 = dict(latency_runs=0, calibration_batches=2, max_acc_drop=100.0)
    sources = {"onnx_int8": ["onnx"], "openvino_int8": ["onnx", "openvino"]}.get(name, [])
    config = ExportConfig(formats=[*sources, name], int8=int8)
    splits = trained.data.splits
    data, files, written = ExportData(splits["train"], splits["val"]), {}, []
    for writer in config.writers():  # each after its sources
        writer.bind(files, data)
        path = tmp_path / writer.file
        if type(writer).export is Writer.export:
            write_observed(writer, trained.net, trained.spec, path)
        else:  # Core ML: a folder, through fileio.atomic_dir
            _observe_folder_writer(writer, trained.net, trained.spec, path, monkeypatch)
        written.append(writer.key)
        files[writer.key] = path
    assert name in written, written
