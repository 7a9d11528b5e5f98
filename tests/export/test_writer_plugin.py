"""A new export format with an option of its own is one file, one registration and one YAML:
``python -m lightning_cls.export export=<it> export.<it>.<option>=...`` writes it through the
skeleton (checked against eager PyTorch) with that option, handed to that writer alone.
Nothing in the library is edited for it. And the old layout's keys (``export.opset``,
``export.quantize.*``, ...) still work, each with one line naming its new key."""

from __future__ import annotations

import logging
import textwrap

import onnx
import pytest

from lightning_cls.export import FORMATS, ExportConfig, register_format
from lightning_cls.export.__main__ import export

WRITER = '''
"""``onnx_doc``: ``model_doc.onnx``, the ONNX file with a note of its own in its doc_string
(an option of its own: ``export.onnx_doc.note``)."""

from dataclasses import dataclass

import onnx

from lightning_cls.export import Writer
from lightning_cls.export.onnx import INPUT_NAME, OPSET, OUTPUT_NAME, write_onnx


@dataclass
class DocOptions:
    note: str = "no note"


class OnnxDocWriter(Writer):
    key, file, title = "onnx_doc", "model_doc.onnx", "ONNX with a note"
    modules = ("onnx", "onnxruntime")
    Options = DocOptions

    def __init__(self, note: str = "no note"):
        self.note = note

    def write(self, net, example, tmp, spec):
        write_onnx(net, example, tmp, spec, OPSET, INPUT_NAME, OUTPUT_NAME)
        model = onnx.load(str(tmp))
        model.doc_string = self.note
        onnx.save_model(model, str(tmp))
'''


@pytest.fixture
def doc_format(tmp_path, monkeypatch):
    """The writer's file, its registration and its YAML (a project's own conf/export/)."""
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "onnx_doc_writer.py").write_text(textwrap.dedent(WRITER))
    monkeypatch.syspath_prepend(str(tmp_path / "plugin"))
    register_format("onnx_doc", "onnx_doc_writer:OnnxDocWriter")
    conf = tmp_path / "conf" / "export"
    conf.mkdir(parents=True)
    yaml = "defaults:\n  - default\n\nformats: [onnx_doc]\nonnx_doc:\n  note: from its YAML\n"
    (conf / "onnx_doc.yaml").write_text(yaml)
    yield tmp_path / "conf"
    FORMATS.pop("onnx_doc")


def test_a_new_format_with_its_own_option_is_exported_with_it(
    trained, helpers, tmp_path, doc_format
):
    search = f"hydra.searchpath=[file://{doc_format}]"
    common = [search, f"ckpt_path={trained.ckpt}", "export=onnx_doc"]
    cfg = helpers.compose(
        [*common, "export.onnx_doc.note=given", f"output_dir={tmp_path}/a"], tmp_path
    )
    path = export(cfg).paths["onnx_doc"]
    assert path == tmp_path / "a" / "model_doc.onnx"
    assert onnx.load(str(path)).doc_string == "given"  # the option reached its writer
    cfg = helpers.compose([*common, f"output_dir={tmp_path}/b"], tmp_path)
    assert onnx.load(str(export(cfg).paths["onnx_doc"])).doc_string == "from its YAML"
    # Its option is its own: with onnx beside it, ONNX gets only export.onnx.*
    config = ExportConfig(["onnx", "onnx_doc"], onnx={"opset": 17}, onnx_doc={"note": "x"})
    assert [(w.key, vars(w)) for w in config.writers()] == [
        ("onnx", {"opset": 17}),
        ("onnx_doc", {"note": "x"}),
    ]
    with pytest.raises(
        ValueError, match=r"export.onnx_doc has no option note2 \(export=onnx_doc takes note\)"
    ):
        ExportConfig(["onnx_doc"], onnx_doc={"note2": "x"})


def test_the_old_keys_are_read_with_a_line_naming_the_new_key(caplog):
    with caplog.at_level(logging.WARNING, "lightning_cls.export.exporter"):
        config = ExportConfig(
            ["onnx", "openvino", "onnx_int8", "torchscript_int8_dynamic"],
            opset=17,
            torchscript_modes=("trace",),
            openvino_precision="bf16",
            quantize={"dynamic": False, "openvino": True, "max_acc_drop": 2.0},
        )
    assert config.formats == ["onnx", "openvino", "onnx_int8", "openvino_int8"]
    assert config.options == {
        "onnx": {"opset": 17},
        "torchscript": {"modes": ["trace"]},
        "openvino": {"precision": "bf16"},
        "int8": {"max_acc_drop": 2.0},
    }
    writers = {w.key: w for w in config.writers()}
    assert writers["onnx"].opset == 17 and writers["openvino"].precision == "bf16"
    assert writers["openvino_int8"].quantize.max_acc_drop == 2.0
    lines = caplog.text
    assert "export.opset=17 is deprecated and will be removed; use export.onnx.opset=17" in lines
    assert "use export.torchscript.modes=[trace] instead" in lines
    assert "use export.openvino.precision=bf16 instead" in lines
    assert "openvino_int8 in export.formats (for export.quantize.openvino=true)" in lines
    assert (
        "no torchscript_int8_dynamic in export.formats (for export.quantize.dynamic=false)" in lines
    )
    assert "export.int8.max_acc_drop=2.0" in lines


def test_a_run_folder_config_of_the_old_layout_still_instantiates(caplog):
    """``export:`` as train and export saved it in a run's .hydra/config.yaml before the
    writers took their own options (nested ``_target_``s included)."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    saved = OmegaConf.create(
        {
            "_target_": "lightning_cls.export.ExportConfig",
            "_convert_": "all",
            "formats": ["onnx"],
            "opset": 18,
            "torchscript_modes": ["trace", "script"],
            "check_batch_sizes": [1, 7],
            "atol": 1e-4,
            "rtol": 1e-3,
            "quantize": {"_target_": "lightning_cls.export.QuantizeConfig", "static": True,
                         "dynamic": False, "calibration_batches": 4, "openvino": False},
            "openvino_precision": "f32",
            "auto": {},
            "triton": {"_target_": "lightning_cls.export.triton.TritonConfig", "instances": 2},
        }
    )  # fmt: skip
    config = instantiate(saved)
    assert config.formats == ["onnx", "onnx_int8"]
    assert config.options["int8"] == {"calibration_batches": 4}
    assert config.options["triton"]["instances"] == 2
    assert [w.key for w in config.writers()] == ["onnx", "onnx_int8"]


def test_the_command_line_takes_the_old_keys(trained, tmp_path, fork_server, fork_env):
    argv = ["-m", "lightning_cls.export", f"paths.root_dir={tmp_path}", f"ckpt_path={trained.ckpt}",
            "export=onnx", "export.opset=17", f"output_dir={tmp_path}/out"]  # fmt: skip
    run = fork_server.run(argv, tmp_path, fork_env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    model = onnx.load(str(tmp_path / "out" / "model.onnx"))
    assert {o.domain: o.version for o in model.opset_import}[""] == 17
    out = run.stderr + run.stdout
    assert "export.opset=17 is deprecated and will be removed; use export.onnx.opset=17" in out
