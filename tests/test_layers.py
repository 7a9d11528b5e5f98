"""The import rules of docs/architecture.md ("Layers"), checked on the source.

Hydra lives only in the entry points: everything below them takes plain Python objects, so
``import lightning_cls.data`` works in anybody's project. And no layer imports a higher one.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "lightning_cls"

# The library roots; every other module at the root of the package is a command.
LIBRARY_ROOTS = {"__init__", "module", "registry", "fileio"}


def _entry_points() -> set[str]:
    """The only files that may import hydra/omegaconf: the commands (every root module except
    the library roots, every ``*/__main__.py``) and ``cli/`` (run_cli, resolvers, printing)."""
    roots = {p.name for p in PACKAGE.glob("*.py") if p.stem not in LIBRARY_ROOTS}
    mains = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.glob("*/__main__.py")}
    cli = {p.relative_to(PACKAGE).as_posix() for p in (PACKAGE / "cli").glob("*.py")}
    return roots | mains | cli


ENTRY_POINTS = _entry_points()

# Layer of each top-level module or sub-package, lowest first; the table in docs/architecture.md.
LAYERS = {
    "base": {"__init__", "registry", "fileio"},
    "models": {"models"},
    "inference": {"inference"},
    "figures": {"figures"},
    "explain": {"explain"},
    "data": {"data"},
    "training": {"module", "training", "callbacks", "doctor"},
    "export": {"export"},
    "serving": {"serve"},
}
RANK = {unit: rank for rank, units in enumerate(LAYERS.values()) for unit in units}
# The folders (and root modules) in the order they may import one another, lowest first: the
# layers above, and inside the training layer the pure training code below the LightningModule,
# its callbacks and the doctor (tests/test_import_graph.py counts imports inside functions too).
FOLDERS = [
    "__init__", "registry", "fileio", "models", "inference", "figures", "explain", "data",
    "training", "module", "callbacks", "doctor", "export", "serve",
]  # fmt: skip
assert set(FOLDERS) == set(RANK), "FOLDERS orders the units of LAYERS"
ENTRY_RANK = len(LAYERS)


def library_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "conf" not in p.relative_to(PACKAGE).parts)


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement names, at any depth (lazy imports in functions too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            if node.module == "lightning_cls":  # from lightning_cls import data
                names.update(f"lightning_cls.{alias.name}" for alias in node.names)
    return names


def unit_of(path: Path) -> str:
    return path.relative_to(PACKAGE).with_suffix("").parts[0]


def rank_of(path: Path) -> int:
    rel = path.relative_to(PACKAGE).as_posix()
    return ENTRY_RANK if rel in ENTRY_POINTS else RANK[unit_of(path)]


def test_every_module_has_a_layer():
    unknown = sorted(
        {unit_of(p) for p in library_files()}
        - set(RANK)
        - {Path(e).parts[0].removesuffix(".py") for e in ENTRY_POINTS}
    )
    assert not unknown, (
        f"lightning_cls/{unknown} is in no layer: add it to LAYERS here and to the table in "
        "docs/architecture.md."
    )


def test_only_entry_points_import_hydra_or_omegaconf():
    offenders = [
        f"{path.relative_to(REPO)} imports {name}"
        for path in library_files()
        if path.relative_to(PACKAGE).as_posix() not in ENTRY_POINTS
        for name in sorted(imported_modules(path))
        if name.split(".")[0] in ("hydra", "omegaconf")
    ]
    assert not offenders, "library code must take plain objects, not configs:\n" + "\n".join(
        offenders
    )


def test_no_layer_imports_a_higher_one():
    offenders = []
    for path in library_files():
        rank = rank_of(path)
        for name in sorted(imported_modules(path)):
            parts = name.split(".")
            if parts[0] != "lightning_cls" or len(parts) < 2:
                continue
            entry = "/".join(parts[1:]) + ".py"
            target = ENTRY_RANK if entry in ENTRY_POINTS else RANK.get(parts[1])
            if target is not None and target > rank:
                offenders.append(f"{path.relative_to(REPO)} imports {name}")
    assert not offenders, "a lower layer imports a higher one:\n" + "\n".join(offenders)


def test_the_checker_sees_lazy_and_package_imports(tmp_path):
    source = tmp_path / "sample.py"
    source.write_text(
        "from lightning_cls import data\n"
        "def f():\n    import hydra.utils\n    from omegaconf import OmegaConf\n"
    )
    assert imported_modules(source) >= {"lightning_cls.data", "hydra.utils", "omegaconf"}


def test_every_entry_point_ends_through_run_cli():
    """A user error of any command-line tool ends in one line and exit code 1 (cli.py)."""
    missing = []
    for rel in sorted(e for e in ENTRY_POINTS if not e.startswith("cli/")):
        path = PACKAGE / rel
        if path.is_file() and "run_cli(main)" not in path.read_text():
            missing.append(rel)
    assert not missing, f"end these with `if __name__ == '__main__': run_cli(main)`: {missing}"


def test_the_root_shows_the_architecture():
    """The commands and a handful of library roots; everything else lives in a sub-package."""
    roots = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(roots) <= 13, f"{len(roots)} modules at the root of lightning_cls: {roots}"
    assert {"train.py", "eval.py", "predict.py", "module.py"} <= set(roots)


def test_entry_points_are_derived_from_the_layout():
    assert {"train.py", "optimize_data.py", "export/__main__.py", "cli/__init__.py"} <= ENTRY_POINTS
    assert not ENTRY_POINTS & {"module.py", "fileio.py", "registry.py"}


# Each of these must import without Lightning and without Hydra: a server, an exporter and the
# sweeper run on machines that never train. Then the library as a plain training script uses it
# (and every registry lookup, which imports each built-in and installed plug-in) must not load
# Hydra: the AST test above covers our own imports statically, this catches a third-party import
# that pulls it in.
LIGHT_IMPORTS = {
    "lightning_cls.training.trials": ("pytorch_lightning", "torch"),
    "lightning_cls.inference": ("pytorch_lightning", "hydra", "omegaconf"),
    "lightning_cls.export": ("pytorch_lightning", "hydra", "omegaconf"),
    "lightning_cls.export.onnx": ("pytorch_lightning", "hydra", "omegaconf"),
    "lightning_cls.export.quantize": ("pytorch_lightning", "hydra", "omegaconf"),
    "lightning_cls.export.openvino": ("pytorch_lightning", "hydra", "omegaconf"),
    "lightning_cls.export.exporter": ("pytorch_lightning", "hydra", "omegaconf"),
    "lightning_cls.data": ("hydra", "omegaconf"),
    "lightning_cls.module": ("hydra", "omegaconf"),
    "lightning_cls.training.resume": ("hydra", "omegaconf"),
    "lightning_cls.callbacks.registry": ("hydra", "omegaconf"),
}
# Imported in a process of its own: it imports Hydra, which the modules above must not.
SWEEPER = {
    "hydra_plugins.lightning_cls_optuna_sweeper.optuna_sweeper": ("pytorch_lightning", "optuna")
}
REGISTRY_LOOKUPS = (
    "from lightning_cls.callbacks.registry import list_callbacks\n"
    "from lightning_cls.data import list_datasets\nfrom lightning_cls.models import list_models\n"
    "list_callbacks(), list_datasets(), list_models()\n"
)


def _loaded_after_each(imports: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """Import the modules in order in one fresh interpreter (this test process has imported
    them all already); after each, which of its forbidden modules are loaded. Loaded after
    modules 1..k includes whatever module k alone loads, so an empty list clears module k, and
    the first module with a non-empty one is the culprit. The registry lookups run with the
    last module."""
    lines = ["import importlib, json, sys", "seen = {}"]
    for module, forbidden in imports.items():
        lines.append(f"importlib.import_module({module!r})")
        if module == "lightning_cls.callbacks.registry":
            lines.append(REGISTRY_LOOKUPS)
        lines.append(f"seen[{module!r}] = sorted(m for m in {forbidden!r} if m in sys.modules)")
    lines.append("print(json.dumps(seen))")
    code = "\n".join(lines)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def loaded_after() -> dict[str, list[str]]:
    return {**_loaded_after_each(LIGHT_IMPORTS), **_loaded_after_each(SWEEPER)}


@pytest.mark.parametrize("module", sorted({**LIGHT_IMPORTS, **SWEEPER}))
def test_light_modules_import_without_lightning_or_hydra(module, loaded_after):
    assert loaded_after[module] == [], f"import {module} loaded {loaded_after[module]}"


def test_the_import_check_names_the_module_that_loads_a_forbidden_one():
    # fractions imports decimal; json does not.
    seen = _loaded_after_each({"json": ("decimal",), "fractions": ("decimal",), "csv": ()})
    assert seen == {"json": [], "fractions": ["decimal"], "csv": []}


# What each light path of a command must not load (a fresh process each, ``-X importtime``).
TRAINING = ("pytorch_lightning", "torchmetrics", "lightning_cls.callbacks", "lightning_cls.module")
# The ONNX paths of predict and serve build no network (torchvision, the model registry) and
# never import torch: Predictor, the spec, the task and the batcher compute with numpy there.
ONNX_PATH = (*TRAINING, "torch", "torchvision", "lightning_cls.models")


def _commands() -> list[str]:
    """Every command a user runs (``python -m lightning_cls.<command>``): the entry points with
    a ``@hydra.main``, derived from the layout like ``ENTRY_POINTS``."""
    found = []
    for rel in sorted(ENTRY_POINTS - {e for e in ENTRY_POINTS if e.startswith("cli/")}):
        if "@hydra.main(" in (PACKAGE / rel).read_text():
            found.append(rel.removesuffix("/__main__.py").removesuffix(".py"))
    return found


COMMANDS = _commands()
# A misspelt option of each command: (the real key, the typo on the command line).
MISSPELT = {
    "bench_data": ("warmup_batches", "warmup_batch=2"),
    "calibrate": ("calibration.temperature", "calibration.temprature=1.5"),
    "doctor": ("doctor.folds", "doctor.fold=3"),
    "eval": ("split", "splt=val"),
    "explain": ("method", "methd=cam"),
    "export": ("output_dir", "output_dri=out"),
    "inspect_model": ("data.batch_size", "data.bach_size=8"),
    "optimize_data": ("chunk_bytes", "chunk_byte=1MB"),
    "predict": ("top_k", "topk=3"),
    "serve": ("serve.port", "serve.prot=8001"),
    "stats": ("data.batch_size", "data.batchsize=8"),
    "train": ("trainer.max_epochs", "trainer.max_epoch=1"),
}


def test_the_commands_are_derived_from_the_layout_and_each_has_a_typo_case():
    assert {"train", "eval", "predict", "serve", "export", "doctor", "explain"} <= set(COMMANDS)
    assert sorted(MISSPELT) == COMMANDS, "give each command a misspelt option in MISSPELT"


def _run_and_list_imports(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, set]:
    """Run ``python -X importtime <args>``; the process and every module it imported."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )
    return out, _imported(out.stderr)


def _imported(log: str) -> set[str]:
    lines = (line for line in log.splitlines() if line.startswith("import time:"))
    return {line.rsplit("|", 1)[1].strip() for line in lines}


def _loaded(modules: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted({m for m in modules for f in forbidden if m == f or m.startswith(f + ".")})


@pytest.mark.parametrize("command", COMMANDS)
def test_help_loads_neither_lightning_nor_torch(command, tmp_path):
    out, modules = _run_and_list_imports(["-m", f"lightning_cls.{command}", "--help"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert _loaded(modules, (*TRAINING, "torch")) == [], f"{command} --help loaded them"


@pytest.mark.parametrize(
    ("args", "message", "forbidden"),
    [  # a Hydra config error; a settings check before training; a missing checkpoint
        (["train", "trainer.max_epoch=1"], "did you mean trainer.max_epochs?", "torch"),
        (["train", "optimizer.lr=abc"], "optimizer.lr='abc' is not a number", None),
        (["eval", "ckpt_path=missing.ckpt"], "Checkpoint not found", None),
    ],
)
def test_a_user_errors_one_line_loads_no_lightning(args, message, forbidden, tmp_path):
    command = ["-m", f"lightning_cls.{args[0]}", *args[1:], f"hydra.run.dir={tmp_path}/run"]
    out, modules = _run_and_list_imports(command, tmp_path)
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.returncode == 1 and len(errors) == 1 and message in errors[0], out.stderr[-3000:]
    assert _loaded(modules, (*TRAINING, *([forbidden] if forbidden else []))) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_misspelt_option_is_one_line_and_loads_neither_lightning_nor_torch(command, tmp_path):
    """Hydra refuses the typo before the command runs: one ``error:`` line naming it and the
    fix, exit 1, and no Lightning or torch paid for (the real key is in the config)."""
    from omegaconf import OmegaConf

    from helpers.hydra_configs import compose

    key, typo = MISSPELT[command]
    config = _config_name(command)
    options = OmegaConf.to_container(compose(config), resolve=False)
    for part in key.split("."):
        assert part in options, f"{key} is no option of {config}.yaml: fix MISSPELT"
        options = options[part]
    argv = ["-m", f"lightning_cls.{command}", typo, f"hydra.run.dir={tmp_path}/run"]
    out, modules = _run_and_list_imports(argv, tmp_path)
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    wrong = typo.split("=")[0]
    assert out.returncode == 1 and len(errors) == 1, out.stderr[-3000:]
    assert errors[0] == f"error: unknown key {wrong}: did you mean {key}?", errors
    assert "Traceback" not in out.stderr
    assert _loaded(modules, (*TRAINING, "torch")) == [], f"{command}'s typo loaded them"


def _config_name(command: str) -> str:
    """The primary config a command composes (its ``@hydra.main(config_name=...)``)."""
    rel = f"{command}.py" if (PACKAGE / f"{command}.py").is_file() else f"{command}/__main__.py"
    return re.search(r'config_name="([^"]+)"', (PACKAGE / rel).read_text()).group(1)


@pytest.fixture(scope="module")
def onnx_and_png(tmp_path_factory) -> tuple[Path, Path]:
    """A 3-class linear model on 8 x 8 RGB images (built with onnx.helper: no exporter run)
    with its spec in ``metadata_props``, and one PNG."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from PIL import Image

    from lightning_cls.inference import InputSpec

    root = tmp_path_factory.mktemp("onnx_path")
    spec = InputSpec(classes=["a", "b", "c"], mean=(0.5,) * 3, std=(0.25,) * 3, image_size=8,
                     num_channels=3)  # fmt: skip
    weight = np.random.default_rng(0).normal(size=(192, 3)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["input"], ["flat"], axis=1),
            helper.make_node("MatMul", ["flat", "weight"], ["logits"]),
        ],
        "linear",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(weight, "weight")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, spec.to_props())
    onnx.save(model, root / "model.onnx")
    pixels = np.random.default_rng(1).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(root / "image.png")
    return root / "model.onnx", root / "image.png"


def _as_openvino(onnx_model: Path) -> Path:
    """The ONNX model converted to OpenVINO IR, its spec in rt_info (as export=openvino writes)."""
    ov = pytest.importorskip("openvino")
    from lightning_cls.inference.openvino import RT_SECTION, spec_props
    from lightning_cls.inference.runtimes import OnnxRuntime

    model = ov.convert_model(str(onnx_model))
    for key, value in spec_props(OnnxRuntime(onnx_model).spec, "f32").items():
        model.set_rt_info(value, [RT_SECTION, key])
    xml = onnx_model.with_name("model.xml")
    ov.save_model(model, str(xml))
    return xml


@pytest.mark.parametrize("kind", ["onnx", "openvino"])
def test_predict_with_an_onnx_or_openvino_file_never_imports_torch(kind, onnx_and_png, tmp_path):
    model, png = onnx_and_png
    model = _as_openvino(model) if kind == "openvino" else model
    args = [f"ckpt_path={model}", f"inputs={png}", f"output={tmp_path}/p.csv"]
    out, modules = _run_and_list_imports(
        ["-m", "lightning_cls.predict", *args, f"hydra.run.dir={tmp_path}/run"], tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "p.csv").read_text().splitlines()[1].startswith(str(png))
    assert _loaded(modules, ONNX_PATH) == []


def test_serve_of_an_onnx_file_never_imports_torch(onnx_and_png, tmp_path):
    import socket
    import urllib.request

    model, png = onnx_and_png
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-X", "importtime", "-m", "lightning_cls.serve", f"ckpt_path={model}"]
    cmd += [f"serve.port={port}", f"hydra.run.dir={tmp_path}/run"]
    log = tmp_path / "stderr.txt"
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as r:
                    break
            except OSError:
                time.sleep(0.1)
        request = urllib.request.Request(
            url + "/predict", data=png.read_bytes(), headers={"Content-Type": "image/png"}
        )
        with urllib.request.urlopen(request, timeout=30) as r:
            assert r.status == 200 and json.loads(r.read())["predictions"]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert _loaded(_imported(log.read_text()), ONNX_PATH) == []
