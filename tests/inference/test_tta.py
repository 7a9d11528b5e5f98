"""The TTA object: built from conf/tta, carried by the spec as one entry, and read from every
older layout (flat spec keys, flat checkpoint hyperparameters, old command-line keys)."""

import json
import warnings

import pytest
import torch
from hydra.utils import instantiate

from helpers.hydra_configs import compose
from helpers.tiny import make_data, make_module
from lightning_cls.cli.renamed import renamed
from lightning_cls.inference.spec import InputSpec, SpecError, merge_spec, props_to_dict
from lightning_cls.inference.tta import TTA
from lightning_cls.module import ClassificationModule

BASE = dict(classes=["a", "b"], mean=[0.5], std=[0.25], image_size=8, num_channels=1)


def test_a_spec_written_with_flat_tta_keys_reads_into_its_one_tta_entry():
    old = {**BASE, "tta_flip": True, "tta_translate": 2, "tta_threshold": 0.4}
    spec = InputSpec.from_dict(old)
    assert spec.tta == TTA(flip=True, translate=2, threshold=0.4)
    written = spec.to_dict()
    assert "tta_flip" not in written and written["tta"]["translate"] == 2
    assert InputSpec.from_json(json.dumps(written)) == spec
    # ONNX metadata_props of an older file: one JSON value per flat key
    props = {k: json.dumps(v) for k, v in old.items()}
    assert InputSpec.from_props(props).tta == spec.tta
    assert "tta_flip" in props_to_dict(props)  # not skipped as another tool's entry
    # +spec.tta_flip=false on a file written with the tta entry: the old key still overrides
    assert merge_spec(written, {"tta_flip": False}, "model.onnx").tta.flip is False
    assert merge_spec(written, {"tta": {"flip": False}}, "model.onnx").tta == TTA()
    with pytest.raises(SpecError, match=r"tta.translate=-1 is not a pixel shift; use an int"):
        InputSpec.from_dict({**BASE, "tta_translate": -1})
    with pytest.raises(SpecError, match=r"tta=7 is not a TTA; pass TTA\(flip=..., translate"):
        InputSpec(**BASE, tta=7)


def test_the_tta_group_builds_the_object_and_old_keys_are_renamed_with_a_warning(capsys):
    assert instantiate(compose("train").tta) == TTA()
    cfg = compose("train", ["tta=airbench_selective", "tta.tolerance=0.01"])
    assert instantiate(cfg.tta) == TTA(flip=True, translate=1, mode="selective", tolerance=0.01)
    assert instantiate(compose("train", ["experiment=cifar10_fast"]).tta) == TTA(True, 1)
    old = ["tta_flip=true", "tta_translate=2", "tta=selective", "tta_tolerance=0.01", "tta=flip"]
    new = renamed("train", old)
    assert new == ["tta.flip=true", "tta.translate=2", "tta.mode=selective", "tta.tolerance=0.01",
                   "tta=flip"]  # fmt: skip
    err = capsys.readouterr().err
    assert "warning: tta_flip= is deprecated and will be removed; use tta.flip=" in err
    assert "warning: tta= is deprecated and will be removed; use tta.mode=" in err
    assert err.count("warning:") == 4  # tta=flip is the group's own option
    built = instantiate(compose("train", new[:4]).tta)
    assert built == TTA(flip=True, translate=2, mode="selective", tolerance=0.01)
    assert renamed("eval", ["tta_flip=true"]) == ["tta_flip=true"]  # eval's own key


def _old_layout_checkpoint(path, module: ClassificationModule) -> None:
    """What the module wrote before the TTA object and spec-only constructor: the input fields,
    the TTA options and the task options flat beside model_name/model_kwargs."""
    spec = InputSpec.from_hparams(module.hparams)
    saved = {
        "model_name": module.hparams.model_name,
        "model_kwargs": dict(module.hparams.model_kwargs),
        "classes": list(spec.classes), "mean": list(spec.mean), "std": list(spec.std),
        "image_size": spec.image_size, "num_channels": spec.num_channels, "resize_size": None,
        "tta_flip": True, "tta_translate": 1, "tta": "selective", "tta_threshold": 0.9,
        "tta_tolerance": 0.01, "task": "multiclass", "label_smoothing": 0.1,
    }  # fmt: skip
    state = {"state_dict": module.state_dict(), "hyper_parameters": saved}
    torch.save({**state, "pytorch-lightning_version": "2.5.0"}, path)


def test_an_old_layout_checkpoint_loads_and_predicts_the_same(tmp_path):
    torch.manual_seed(0)
    data = make_data()
    data.setup("test")
    tta = TTA(flip=True, translate=1, mode="selective", threshold=0.9, tolerance=0.01)
    task = {"name": "multiclass", "label_smoothing": 0.1}
    module = make_module(data, module_kwargs={"tta": tta, "task": task}).eval()
    _old_layout_checkpoint(tmp_path / "old.ckpt", module)
    with pytest.warns(DeprecationWarning) as caught:
        loaded = ClassificationModule.load_from_checkpoint(tmp_path / "old.ckpt").eval()
    messages = " | ".join(str(w.message) for w in caught)
    assert "hyperparameters tta, tta_flip, tta_threshold, tta_tolerance, tta_translate" in messages
    assert "hyperparameters label_smoothing: deprecated, a task's options now live" in messages
    assert loaded.tta == tta and loaded.hparams.task == task
    assert InputSpec.from_hparams(loaded.hparams) == InputSpec.from_hparams(module.hparams)
    x = data.spec.preprocess(data.splits["test"].images[:16])
    with torch.no_grad():
        expected = module.predict_step(x, 0)
        torch.testing.assert_close(loaded.predict_step(x, 0), expected)
        plain = module.decision.probabilities(module(x))
    assert not torch.allclose(plain, expected)  # negative control: the TTA is applied
    # Saved again, the checkpoint holds the new layout, which loads without a warning.
    new = tmp_path / "new.ckpt"
    state = {"state_dict": loaded.state_dict(), "hyper_parameters": dict(loaded.hparams)}
    torch.save({**state, "pytorch-lightning_version": "2.5.0"}, new)
    hparams = torch.load(new, weights_only=True)["hyper_parameters"]
    assert hparams["tta"] == tta.to_dict() and "tta_flip" not in hparams
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        again = ClassificationModule.load_from_checkpoint(new)
    assert again.tta == tta and again.classes == module.classes
