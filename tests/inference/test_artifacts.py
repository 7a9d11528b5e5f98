"""One Predictor for every artifact: same top-1 on the same image files, failures listed."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from lightning_cls.export.exporter import ExportConfig, export_model
from lightning_cls.inference import (
    artifact_kind,
    load_artifact,
    load_torch_model,
    predict_files,
    write_predictions_csv,
)


@pytest.fixture
def image_files(trained, tmp_path):
    """12 validation images as PNG files, a text file and a truncated PNG."""
    val = trained.data.splits["val"]
    folder = tmp_path / "images"
    folder.mkdir()
    paths = []
    for i in range(12):
        path = folder / f"img_{i:02d}.png"
        Image.fromarray(val.images[i].permute(1, 2, 0).numpy(), "RGB").save(path)
        paths.append(path)
    (folder / "notes.txt").write_text("not an image")
    (folder / "broken.png").write_bytes(paths[0].read_bytes()[:-40])
    return paths + [folder / "notes.txt", folder / "broken.png"], val.labels[:12]


@pytest.fixture
def exported(trained, tmp_path):
    config = ExportConfig(formats=["onnx", "pt2", "torchscript"], torchscript={"modes": ["trace"]})
    return export_model(trained.net, trained.spec, tmp_path / "export", config).paths


def test_same_top1_across_ckpt_onnx_pt2(trained, exported, image_files):
    files, labels = image_files
    weights = exported["onnx"].parent / "model_weights.pt"
    torch.save(trained.net.state_dict(), weights)  # meta.json beside it holds the preprocessing
    artifacts = [
        trained.ckpt,
        exported["onnx"],
        exported["pt2"],
        exported["torchscript_trace"],
        weights,
    ]
    top1 = {}
    for path in artifacts:
        predictor = load_artifact(path, model_name="simplecnn", trust_artifact=True)
        rows, failures = predict_files(predictor, files, batch_size=5, top_k=3)
        assert [r["file"] for r in rows] == [str(f) for f in files[:12]]
        assert sorted((p.name, reason.split(" ")[0]) for p, reason in failures) == [
            ("broken.png", "corrupt"),
            ("notes.txt", "not"),
        ]
        assert all(
            len(r["labels"]) == 3 and r["probs"] == sorted(r["probs"], reverse=True) for r in rows
        )
        top1[predictor.kind] = [r["labels"][0] for r in rows]
    assert set(top1) == {"ckpt", "onnx", "pt2", "torchscript", "weights"}
    assert all(t == top1["ckpt"] for t in top1.values()), top1
    truth = [trained.spec.classes[i] for i in labels]
    assert sum(a == b for a, b in zip(top1["ckpt"], truth)) >= 10  # the model is right, too


def test_predictions_csv_lists_failures(trained, image_files, tmp_path):
    files, _ = image_files
    rows, failures = predict_files(load_artifact(trained.ckpt), files, top_k=2)
    out = tmp_path / "pred.csv"
    write_predictions_csv(out, rows, failures, top_k=2)
    lines = out.read_text().splitlines()
    assert lines[0] == "file,label_1,label_2,prob_1,prob_2,error"
    assert len(lines) == 1 + len(files)
    assert any("notes.txt" in line and "not a readable image" in line for line in lines)


def test_predictor_checks_input_shape(exported):
    predictor = load_artifact(exported["onnx"])
    with pytest.raises(ValueError, match=r"expects input \(B, 3, 16, 16\), got \(2, 3, 8, 8\)"):
        predictor.logits(torch.zeros(2, 3, 8, 8))


def test_weights_without_metadata_say_what_is_missing(trained, tmp_path):
    path = tmp_path / "model_weights.pt"
    torch.save(trained.net.state_dict(), path)
    with pytest.raises(ValueError, match=r"holds weights only.*model_weights\.json or meta\.json"):
        load_artifact(path, model_name="simplecnn")
    (tmp_path / "meta.json").write_text(json.dumps(trained.spec.to_dict()))
    (tmp_path / "meta.json").write_text(json.dumps({**trained.spec.to_dict(), "model_name": None}))
    with pytest.raises(ValueError, match="pass model_name=<registry name>"):
        load_artifact(path)


def test_unknown_suffix_and_missing_file(tmp_path):
    (tmp_path / "model.bin").write_bytes(b"")
    with pytest.raises(ValueError, match=r"suffix '\.bin'; use one of \.ckpt, \.mlpackage, \.onnx"):
        artifact_kind(tmp_path / "model.bin")
    with pytest.raises(FileNotFoundError, match="Model artifact not found"):
        load_artifact(tmp_path / "nope.onnx")


def test_compiled_wrapper_keys_are_stripped(trained, tmp_path):
    """A checkpoint saved from ``torch.compile(net)`` has ``_orig_mod.`` in every key."""
    ckpt = torch.load(trained.ckpt, map_location="cpu", weights_only=True)
    ckpt["state_dict"] = {
        k.replace("net.", "net._orig_mod.", 1): v for k, v in ckpt["state_dict"].items()
    }
    path = tmp_path / "compiled.ckpt"
    torch.save(ckpt, path)
    net, meta = load_torch_model(path)
    x = torch.randn(3, *meta.input_shape)
    with torch.no_grad():
        torch.testing.assert_close(net(x), trained.net(x))


def test_weights_next_to_their_checkpoint_need_nothing_else(trained, tmp_path):
    """``SaveModelWeights`` writes model_weights.pt beside the best checkpoint."""
    (tmp_path / "best.ckpt").write_bytes(trained.ckpt.read_bytes())
    torch.save(trained.net.state_dict(), tmp_path / "model_weights.pt")
    predictor = load_artifact(tmp_path / "model_weights.pt")
    assert predictor.kind == "weights" and predictor.spec.classes == trained.spec.classes
    x = torch.randn(2, *trained.spec.input_shape)
    with torch.no_grad():
        torch.testing.assert_close(predictor.logits(x), trained.net(x))
