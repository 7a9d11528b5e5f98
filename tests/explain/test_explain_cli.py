"""``python -m lightning_cls.explain`` (in-process, the real Hydra config) and ``eval
explain=gradcam``, on the session's trained SimpleCNN (tests/helpers/trained.py)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers.tiny import LEARNABLE, as_overrides
from hydra_helpers import QUIET_TRAINER, compose
from lightning_cls.explain.__main__ import explain


@pytest.fixture(scope="module")
def folder(trained, tmp_path_factory) -> Path:
    """Twelve test images as PNGs in class-named folders (an ImageFolder layout)."""
    root = tmp_path_factory.mktemp("explain_inputs")
    split = trained.data.splits["test"]
    for i in range(12):
        where = root / trained.spec.classes[int(split.labels[i])] / f"img{i}.png"
        where.parent.mkdir(exist_ok=True)
        Image.fromarray(split.images[i].permute(1, 2, 0).numpy()).save(where)
    return root


def test_the_command_writes_overlays_a_csv_and_a_mosaic(trained, folder, tmp_path):
    out = tmp_path / "maps"
    cfg = compose(
        "explain", [f"ckpt_path={trained.ckpt}", f"inputs={folder}", f"output={out}"], tmp_path
    )
    rows = explain(cfg)
    with open(out / "explanations.csv") as fh:
        listed = list(csv.DictReader(fh))
    assert len(rows) == len(listed) == 12  # one map per image: the predicted class
    for row in listed:
        overlay = np.asarray(Image.open(out / row["overlay"]))
        assert overlay.shape == (64, 64, 3)  # 16 px enlarged scale=4 times
        assert row["label"] == row["predicted"] and 0 <= int(row["peak_y"]) < 16
    assert (out / "mosaic.png").stat().st_size > 5000


def test_a_target_class_and_a_bad_layer(trained, folder, tmp_path):
    base = [f"ckpt_path={trained.ckpt}", f"inputs={folder}", f"output={tmp_path}/m"]
    target = trained.spec.classes[1]
    rows = explain(compose("explain", [*base, f"target={target}", "mosaic=false"], tmp_path))
    assert {row["label"] for row in rows} == {target}
    assert not (tmp_path / "m" / "mosaic.png").exists()
    with pytest.raises(ValueError, match=r"layer='feature' is not a module of SimpleCNN\. Did you mean 'features'\?"):  # fmt: skip
        explain(compose("explain", [*base, "layer=feature"], tmp_path))


def test_eval_draws_the_heat_maps_over_its_mosaic(trained, tmp_path, monkeypatch):
    from lightning_cls.eval import evaluate
    from lightning_cls.inference import mosaic

    drawn = {}
    real = mosaic.draw_mosaic

    def spy(images, pred, classes, path, **kwargs):
        heatmaps = kwargs["heatmaps"]
        kwargs["heatmaps"] = drawn["maps"] = heatmaps(images[:4]) if callable(heatmaps) else None
        return real(images[:4], pred[:4], classes, path, **{**kwargs, "true": kwargs["true"][:4]})

    monkeypatch.setattr(mosaic, "draw_mosaic", spy)
    overrides = [f"ckpt_path={trained.ckpt}", *as_overrides(LEARNABLE), *QUIET_TRAINER[:4]]
    evaluate(compose("eval", [*overrides, "explain=gradcam"], tmp_path))
    assert drawn["maps"].shape == (4, 16, 16) and drawn["maps"].amax((1, 2)).eq(1).all()
    assert (tmp_path / "run" / "predictions_test.png").is_file()
