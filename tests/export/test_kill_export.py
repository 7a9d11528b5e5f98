"""An export killed at any moment leaves every final-named file complete and loadable.

``python -m lightning_cls.export`` (ONNX, TorchScript, .pt2, OpenVINO, INT8 of each, and the
on-device formats this machine can write: ExecuTorch ``.pte``, LiteRT, Core ML) first runs
to the end once (the reference: which files, how long it wrote, the size of each ``.bin``).
Then the same command is SIGKILLed at random moments spread over the whole export (uniform
over the reference's writing time, counted from the run's first write: in a write,
between writes, between the two renames of a ``.xml``/``.bin`` pair), once into an empty folder
and once over the reference's finished files. After each kill every file under a final name
must be complete: each model loads, each ``.xml`` has its ``.bin``, each ``.bin`` has the
reference's size; anything else must be a hidden temp file (``fileio.is_temp_file``).

The moments come from a fresh seed each run (more moments tried over the suite's runs than a
fixed seed's two), named in every failure's message; ``KILL_SEED=<seed>`` replays one.

The negative control (``inplace_format.py``) is a format whose writer writes in place under its
final name, the bug this test exists for: the same kill schedule and the same check catch it.

Each command runs forked from the suite's pre-imported server (``ForkServer.popen``), killed by
its pid: the same process a fresh ``python`` would be once its imports are done, which the kill
schedule skips anyway.
"""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import inplace_format
import pytest

from helpers import TRAINED_OVERRIDES as SYNTHETIC  # the `trained` fixture's data
from lightning_cls.fileio import is_temp_file
from lightning_cls.inference import load_artifact

FINAL_NAMES = {
    "meta.json",
    "quantization_report.json",
    "model.onnx",
    "model_int8.onnx",
    "model_trace.torchscript",
    "model_script.torchscript",
    "model_int8_dynamic.torchscript",
    "model.pt2",
    "model.xml",
    "model.bin",
    "model_int8.xml",
    "model_int8.bin",
}
# The on-device formats (``export=all`` writes them where their extra is installed; CI's
# ``make install-dev`` installs them) and their final names; one this machine cannot write is
# left out of the export and named in the test's output.
ON_DEVICE = {"executorch": "model.pte", "litert": "model.tflite", "coreml": "model.mlpackage"}
CONTROL_NAMES = {"meta.json", "model.inplace"}
EXPORT = ["-m", "lightning_cls.export"]  # run as `python ...`, forked (ForkServer.popen)
CONTROL = [str(Path(inplace_format.__file__))]


def _command(program, ckpt, out, tmp_path, *options):
    return [
        *program,
        f"ckpt_path={ckpt}",
        *options,
        f"output_dir={out}",
        f"paths.root_dir={tmp_path}",
        f"paths.output_dir={tmp_path}/run",
        *SYNTHETIC,
    ]


@functools.cache  # asked once: the skipped ones are printed once
def _on_device() -> dict[str, str]:
    """The on-device formats this machine writes, by name, with their final names."""
    from lightning_cls.export.writer import FORMATS

    skipped = {n: FORMATS.get(n).unavailable() for n in ON_DEVICE if FORMATS.get(n).unavailable()}
    if skipped:
        print(f"the kill test leaves out {skipped}")
    return {n: f for n, f in ON_DEVICE.items() if n not in skipped}


def _full_export(ckpt, out, tmp_path):
    int8 = ["onnx_int8", "torchscript_int8_dynamic", "openvino_int8"]
    formats = ",".join(["onnx", "torchscript", "pt2", "openvino", *int8, *_on_device()])
    return _command(
        EXPORT,
        ckpt,
        out,
        tmp_path,
        "export=openvino",
        f"export.formats=[{formats}]",
        "export.int8.latency_runs=2",
        "export.int8.calibration_batches=2",
    )


@dataclass
class Run:
    first_write: float | None  # seconds from the start to the folder's first change
    last_write: float | None  # ... and to its last change seen before the exit (or the kill)
    killed: bool

    @property
    def writing(self) -> float:
        """How long the export wrote: from its first change of the folder to its last."""
        return (self.last_write or 0.0) - (self.first_write or 0.0)


def _snapshot(out: Path) -> dict[str, tuple[int, int]]:
    """Each entry's (mtime, size): a change is a write (a name renamed away is skipped)."""
    found = {}
    for entry in list(out.iterdir()) if out.exists() else []:
        try:
            stat = entry.stat()
        except FileNotFoundError:
            continue
        found[entry.name] = (stat.st_mtime_ns, stat.st_size)
    return found


def _run(server, command, out: Path, env, kill_after: float | None = None) -> Run:
    """Run ``python COMMAND`` forked from the pre-imported ``server`` (no seconds of imports
    before its first write); SIGKILL it ``kill_after`` seconds after its first write."""
    log = out.parent / f"{out.name}.stderr"
    start, seen = time.perf_counter(), _snapshot(out)
    first_write = last_write = None
    with open(log, "wb") as stderr, open(os.devnull, "wb") as devnull:
        proc = server.popen(command, out.parent, env, devnull, stderr)
        try:
            while proc.poll() is None:
                now, snapshot = time.perf_counter() - start, _snapshot(out)
                if snapshot != seen:
                    seen, last_write = snapshot, now
                    first_write = now if first_write is None else first_write
                if kill_after is not None and first_write is not None:
                    if now >= first_write + kill_after:
                        proc.kill()
                        break
                time.sleep(0.005)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=60)
    killed = proc.returncode == -signal.SIGKILL
    if not killed:
        assert proc.returncode == 0, log.read_text()[-3000:]
    return Run(first_write, last_write, killed)


@contextmanager
def _fresh_seed():
    """A fresh seed per run (``KILL_SEED`` replays one), printed and named in any failure."""
    seed = int(os.environ.get("KILL_SEED") or random.SystemRandom().randrange(2**32))
    print(f"kill moments from seed {seed}")
    try:
        yield seed
    except AssertionError as err:
        raise AssertionError(
            f"{err}\n(kill moments from seed {seed}; KILL_SEED={seed} replays)"
        ) from err


def _kill_moments(reference: Run, count: int, seed: int) -> list[float]:
    """Seeded moments spread uniformly over the export's writing, from its first write."""
    rng = random.Random(seed)
    return [rng.random() * reference.writing for _ in range(count)]


def _killed_run(server, command, out: Path, env, after: float, reference: Run) -> Run:
    """``_run`` killed ``after`` seconds into its writing. A run that outpaced the reference
    (the machine was busier while the reference wrote) can end before that moment: it then
    runs again from the same folder state, killed at the same fraction of its own writing."""
    empty = not out.exists()
    run = _run(server, command, out, env, after)
    if not run.killed and reference.writing > 0:
        if empty:
            shutil.rmtree(out)
        run = _run(server, command, out, env, after / reference.writing * run.writing)
    return run


def _bin_sizes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in folder.glob("*.bin")}


def _check_folder(out: Path, names: set[str], bin_sizes: dict[str, int]) -> set[str]:
    """Every final-named file is complete; return the names that were there."""
    present = sorted(p.name for p in out.iterdir()) if out.exists() else []
    final = {n for n in present if not is_temp_file(n)}
    assert final <= names, f"unexpected files: {final - names}"
    for name in sorted(final):
        path = out / name
        if name.endswith(".json"):
            json.loads(path.read_text())
        elif name.endswith(".bin"):  # loaded with its .xml below; a lone one must be whole too
            assert path.stat().st_size == bin_sizes[name], f"{name} is truncated"
        elif name.endswith(".mlpackage"):  # a folder; Core ML predicts on macOS only
            from lightning_cls.export.coreml import read_coreml

            try:
                spec = read_coreml(path).spec
            except Exception as err:
                raise AssertionError(f"{name} does not load: {err}") from err
            assert spec.num_classes == 4, name
        else:
            if name.endswith(".xml"):
                assert path.with_suffix(".bin").name in final, f"{name} without its .bin"
            try:
                predictor = load_artifact(path, trust_artifact=True)
            except Exception as err:
                raise AssertionError(f"{name} does not load: {err}") from err
            assert predictor.spec.num_classes == 4, name
    return final


@pytest.mark.slow
def test_an_export_killed_at_random_moments_leaves_only_complete_files(
    trained, tmp_path, fork_server, fork_env
):
    server, env = fork_server, fork_env
    names = FINAL_NAMES | set(_on_device().values())
    reference_dir, fresh = tmp_path / "reference", tmp_path / "fresh"
    reference = _run(
        server, _full_export(trained.ckpt, reference_dir, tmp_path), reference_dir, env
    )
    sizes = _bin_sizes(reference_dir)
    assert _check_folder(reference_dir, names, sizes) == names
    # Two kills: one into an empty folder, one over the reference's finished files.
    with _fresh_seed() as seed:
        first, second = _kill_moments(reference, 2, seed)
        kills = [
            _killed_run(
                server, _full_export(trained.ckpt, fresh, tmp_path), fresh, env, first, reference
            ),
            _killed_run(
                server,
                _full_export(trained.ckpt, reference_dir, tmp_path),
                reference_dir,
                env,
                second,
                reference,
            ),
        ]
        assert all(k.killed for k in kills), (reference, kills)
        _check_folder(fresh, names, sizes)
        _check_folder(reference_dir, names, sizes)


@pytest.fixture
def inplace_runtime():
    """The control's runtime, so its files load here, for this test only."""
    inplace_format.register()
    yield
    inplace_format.unregister()


@pytest.mark.slow
def test_the_kill_test_catches_a_writer_that_writes_in_place(
    trained, tmp_path, inplace_runtime, fork_server, fork_env
):
    """Negative control: the same kill schedule and check find the in-place writer's torn file."""
    server, env = fork_server, fork_env
    reference_dir, out = tmp_path / "reference", tmp_path / "out"
    options = ("export.formats=[inplace]",)
    command = _command(CONTROL, trained.ckpt, reference_dir, tmp_path, *options)
    reference = _run(server, command, reference_dir, env)
    assert _check_folder(reference_dir, CONTROL_NAMES, {}) == CONTROL_NAMES  # whole, it loads
    command = _command(CONTROL, trained.ckpt, out, tmp_path, *options)
    caught = None
    with _fresh_seed() as seed:
        for after in _kill_moments(reference, 4, seed):
            _run(server, command, out, env, after)
            try:
                _check_folder(out, CONTROL_NAMES, {})
            except AssertionError as err:
                caught = str(err)
                break
        assert caught is not None, "four kills over the export never caught a file written in place"
        assert caught.startswith("model.inplace does not load"), caught
