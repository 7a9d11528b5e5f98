"""The open-set report (``eval ood.near=DIR ood.far=[DIR,...]``, inference/open_set_report.py):
its keys, ranges and figures on the shared trained model, the same numbers from its ONNX
export, and the one-line errors of a bad ``ood``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from helpers.hydra_configs import QUIET_TRAINER, compose
from helpers.tiny import LEARNABLE, as_overrides
from lightning_cls.figures.open_set import write_ood_figures
from lightning_cls.inference.open_set_report import ood_report, ood_sets, open_set_scores

METRICS = ("auroc", "fpr95", "aupr", "oscr", "aurc", "known_accuracy")


def _folder(root: Path, images: np.ndarray) -> Path:
    root.mkdir(parents=True)
    for i, image in enumerate(images):  # (H, W, C) uint8 each
        Image.fromarray(image).save(root / f"{i}.png")
    return root


def near_and_far(tmp_path: Path, n: int = 24) -> tuple[Path, Path]:
    """near: a fifth synthetic class (a new random prototype, LEARNABLE's noise); far: uniform
    noise. AUROC (msp) of the shared model: about 0.72 and 0.96."""
    g = torch.Generator().manual_seed(0)
    size = LEARNABLE["image_size"]
    prototype = torch.rand((1, 3, size, size), generator=g)
    noise = torch.randn((n, 3, size, size), generator=g) * LEARNABLE["noise"] * 0.5
    near = (prototype + noise).clamp(0, 1).mul(255).round().to(torch.uint8)  # (n, 3, H, W)
    far = np.random.default_rng(0).integers(0, 256, (n, size, size, 3), dtype=np.uint8)
    return (
        _folder(tmp_path / "unseen_class", near.permute(0, 2, 3, 1).numpy()),
        _folder(tmp_path / "noise", far),
    )


def test_eval_writes_the_open_set_report(trained, tmp_path):
    from lightning_cls.eval import evaluate

    near, far = near_and_far(tmp_path)
    overrides = [f"ckpt_path={trained.ckpt}", f"ood.near={near}", f"ood.far=[{far}]",
                 "prediction_mosaic=false", *QUIET_TRAINER[:4], *as_overrides(LEARNABLE)]  # fmt: skip
    evaluate(compose("eval", overrides, tmp_path / "e"))
    run = tmp_path / "e" / "run"
    ood = json.loads((run / "results.json").read_text())["ood"]
    assert set(ood) == {"unseen_class", "noise"}
    assert (ood["unseen_class"]["kind"], ood["noise"]["kind"]) == ("near", "far")
    for report in ood.values():
        assert report["known_images"] == 64 and report["ood_images"] == 24, report
        assert all(0 <= report[key] <= 1 for key in METRICS), report
        assert report["oscr"] <= report["known_accuracy"]  # the curve never rises above it
        # no rejection rule: no deployed threshold, and why
        assert report["threshold"] is None and report["false_accept_rate"] is None
        assert "no rejection rule" in report["threshold_note"]
        assert (run / report["histogram"]).stat().st_size > 5000
    assert ood["noise"]["auroc"] > ood["unseen_class"]["auroc"] + 0.1, ood  # 0.96 vs 0.72
    assert ood["noise"]["oscr"] > ood["unseen_class"]["oscr"]
    assert ood["noise"]["aurc"] == ood["unseen_class"]["aurc"]  # the known split's own
    assert ood["noise"]["known_accuracy"] > 0.5  # the model learned: OSCR is not vacuous
    with Image.open(run / "ood_risk_coverage.png") as figure:
        assert figure.size == (1000, 420)


def test_an_onnx_export_gives_the_same_report(trained, tmp_path):
    from lightning_cls.export.exporter import ExportConfig, export_model

    near, far = near_and_far(tmp_path)
    onnx = export_model(trained.net, trained.spec, tmp_path / "x", ExportConfig(formats=["onnx"]))
    known = trained.data.splits["test"]  # the 64 images eval reads (read once, at fit)
    sets = [("near", near), ("far", far)]
    from_ckpt = ood_report(trained.ckpt, known, sets)
    from_onnx = write_ood_figures(
        open_set_scores(onnx.paths["onnx"], known, sets), tmp_path / "figs"
    )
    for name in ("unseen_class", "noise"):
        for key in METRICS:
            assert from_onnx[name][key] == pytest.approx(from_ckpt[name][key], abs=0.02), key
    assert (tmp_path / "figs" / "ood_scores_noise.png").is_file()
    assert "histogram" not in from_ckpt["noise"]  # no out_dir: no figures


def test_a_bad_ood_is_one_line_naming_the_fix(tmp_path):
    assert ood_sets("some/dir") == [("far", Path("some/dir"))]  # ood=DIR: short for ood.far=
    assert ood_sets({"near": "a", "far": ["b", "c"]}) == [
        ("near", Path("a")), ("far", Path("b")), ("far", Path("c")),
    ]  # fmt: skip
    assert ood_sets({"near": None, "far": None}) == []
    with pytest.raises(ValueError, match=r"ood=\{'nearby': 'a'\} is not a set of unknown-image"):
        ood_sets({"nearby": "a"})
    with pytest.raises(FileNotFoundError, match=r"ood.near=.*missing: no such folder; put images"):
        ood_report("unused.ckpt", None, [("near", tmp_path / "missing")])
    (tmp_path / "a" / "noise").mkdir(parents=True)
    (tmp_path / "b" / "noise").mkdir(parents=True)
    twice = [("far", tmp_path / "a" / "noise"), ("far", tmp_path / "b" / "noise")]
    with pytest.raises(ValueError, match=r"share the name 'noise' that results.json keys"):
        ood_report("unused.ckpt", None, twice)


def test_eval_of_an_onnx_file_gives_accuracy_and_the_report(trained, tmp_path):
    """``eval ckpt_path=model.onnx``: the artifact's own runtime, the same accuracy and
    open-set numbers as the .ckpt's evaluation."""
    from lightning_cls.eval import evaluate
    from lightning_cls.export.exporter import ExportConfig, export_model

    near, far = near_and_far(tmp_path)
    onnx = export_model(trained.net, trained.spec, tmp_path / "x", ExportConfig(formats=["onnx"]))
    common = [f"ood.near={near}", f"ood.far=[{far}]", "prediction_mosaic=false",
              *QUIET_TRAINER[:4], *as_overrides(LEARNABLE)]  # fmt: skip
    evaluate(compose("eval", [f"ckpt_path={trained.ckpt}", *common], tmp_path / "c"))
    evaluate(compose("eval", [f"ckpt_path={onnx.paths['onnx']}", *common], tmp_path / "o"))
    from_ckpt = json.loads((tmp_path / "c" / "run" / "results.json").read_text())
    from_onnx = json.loads((tmp_path / "o" / "run" / "results.json").read_text())
    assert from_onnx["test"]["test/acc"] == pytest.approx(from_ckpt["test"]["test/acc"], abs=0.02)
    assert from_onnx["test"]["test/acc"] > 0.5  # the shared model learned
    for name in ("unseen_class", "noise"):
        for key in METRICS:
            assert from_onnx["ood"][name][key] == pytest.approx(
                from_ckpt["ood"][name][key], abs=0.02
            ), key
    assert (tmp_path / "o" / "run" / "ood_risk_coverage.png").is_file()
    with pytest.raises(ValueError, match=r"tta_flip=True: an exported model's test-time"):
        evaluate(compose("eval", [f"ckpt_path={onnx.paths['onnx']}", "tta_flip=true", *common],
                         tmp_path / "t"))  # fmt: skip
