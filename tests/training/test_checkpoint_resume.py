from __future__ import annotations

import os
import time
from dataclasses import replace

import pytest
import torch

from helpers import make_module
from lightning_cls.inference import InputSpec
from lightning_cls.inference.network import check_same_data, network_state_dict
from lightning_cls.module import ClassificationModule
from lightning_cls.training.resume import check_compatible, resolve_ckpt_path


def _module(classes=("c0", "c1", "c2", "c3"), **model_kwargs) -> ClassificationModule:
    return make_module(module_kwargs={"classes": classes}, **model_kwargs)


def _save(module, path):
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}, path)


def test_last_resolves_to_the_newest_run(tmp_path):
    for i, run in enumerate(["2024-01-01_10-00-00", "2024-01-02_10-00-00"]):
        (tmp_path / run).mkdir()
        (tmp_path / run / "last.ckpt").write_bytes(b"x")
        os.utime(tmp_path / run / "last.ckpt", (time.time() + i, time.time() + i))
    assert resolve_ckpt_path("last", tmp_path) == str(
        tmp_path / "2024-01-02_10-00-00" / "last.ckpt"
    )
    assert resolve_ckpt_path(None, tmp_path) is None


def test_missing_checkpoints_are_clear_errors(tmp_path):
    with pytest.raises(
        FileNotFoundError,
        match=r"ckpt_path=last but no last.ckpt exists under .*train this experiment first",
    ):
        resolve_ckpt_path("last", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"Checkpoint not found: ckpt_path=nope.ckpt"):
        resolve_ckpt_path("nope.ckpt", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"is a directory"):
        resolve_ckpt_path(str(tmp_path), tmp_path)


def test_compatible_checkpoint_passes(tmp_path):
    module = _module()
    _save(module, tmp_path / "a.ckpt")
    check_compatible(tmp_path / "a.ckpt", _module())


def test_incompatible_checkpoint_lists_shapes_and_hparams(tmp_path):
    _save(_module(hidden=32), tmp_path / "a.ckpt")
    with pytest.raises(
        ValueError,
        match=r"(?s)shapes differ: net\.classifier\.1\.bias: checkpoint \(32,\) vs model \(16,\).*trained with model_kwargs=",
    ):
        check_compatible(tmp_path / "a.ckpt", _module())


def test_missing_and_unexpected_keys_and_compiled_prefix(tmp_path):
    state = {k.replace("net.", "net._orig_mod."): v for k, v in _module().state_dict().items()}
    torch.save({"state_dict": state}, tmp_path / "c.ckpt")
    with pytest.raises(
        ValueError,
        match=r"(?s)missing from checkpoint: net\.classifier.*in checkpoint but not in model: net\._orig_mod.*torch\.compile",
    ):
        check_compatible(tmp_path / "c.ckpt", _module())


def test_truncated_checkpoint_is_reported(tmp_path):
    _save(_module(), tmp_path / "a.ckpt")
    data = (tmp_path / "a.ckpt").read_bytes()
    (tmp_path / "a.ckpt").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"Cannot read checkpoint .*damaged"):
        check_compatible(tmp_path / "a.ckpt", _module())


def test_a_file_without_a_state_dict_names_the_fix(tmp_path):
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(
        ValueError,
        match=r"list\.pt holds a list with no state_dict; it is not a model checkpoint\. "
        r"Pass a Lightning \.ckpt or a model_weights\.pt",
    ):
        check_compatible(tmp_path / "list.pt", _module())


def test_network_state_dict_strips_the_prefix_and_the_compile_wrapper():
    t = torch.zeros(1)
    state = {"net.a": t, "net._orig_mod.b.weight": t, "train_acc.tp": t}
    assert sorted(network_state_dict(state)) == ["a", "b.weight"]
    assert sorted(network_state_dict({"model.c": t, "x": t}, attribute="model")) == ["c"]
    assert sorted(network_state_dict({"c": t, "_orig_mod.d": t})) == ["c", "d"]  # bare weights


def test_same_class_count_with_other_names_is_refused_on_resume(tmp_path):
    _save(_module(), tmp_path / "a.ckpt")  # classes c0..c3
    other = _module(classes=["c0", "c1", "cat", "dog"])
    with pytest.raises(
        ValueError,
        match=(
            r"a\.ckpt was trained on other data: classes differ \(4 classes vs 4 in this run's data, "
            r"only in the model: \[c2, c3\], only in this run's data: \[cat, dog\]\)\. Use data with"
        ),
    ):
        check_compatible(tmp_path / "a.ckpt", other)


def test_class_order_channels_and_size_are_compared():
    trained = {"classes": ["a", "b"], "num_channels": 3, "image_size": 32}
    check_same_data(trained, {**trained, "mean": [0.5]})  # other keys are not compared
    check_same_data({"classes": None}, trained)  # nothing to compare
    spec = InputSpec(**trained, mean=[0.5] * 3, std=[0.25] * 3)  # a DataModule's spec
    check_same_data(trained, spec)
    with pytest.raises(ValueError, match=r"image_size=32 but the data has image_size=16"):
        check_same_data(spec, replace(spec, image_size=16))
    with pytest.raises(
        ValueError,
        match=r"the same 2 classes in another order .*trained \[a, b\], the data \[b, a\]",
    ):
        check_same_data(trained, {"classes": ["b", "a"]})
    with pytest.raises(
        ValueError, match=r"num_channels=3 but data=x has num_channels=1; image_size=32 but data=x"
    ):
        check_same_data(trained, {"num_channels": 1, "image_size": 8}, data_name="data=x")
    many = [f"k{i}" for i in range(20)]
    with pytest.raises(
        ValueError, match=r"only in the data: \[k0, k1, k2, k3, k4, k5, k6, k7\] \(\+12 more\)"
    ):
        check_same_data({"classes": ["a"]}, {"classes": many})
