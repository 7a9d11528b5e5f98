"""``python -m lightning_cls.explain`` (in-process, the real Hydra config) and ``eval
explain=gradcam``, on the session's trained SimpleCNN (tests/helpers/trained.py)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers.hydra_configs import QUIET_TRAINER, compose
from helpers.tiny import LEARNABLE, as_overrides, colour_photos
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
    from lightning_cls.figures import mosaic

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


@pytest.fixture(scope="module")
def photo_ckpt(tmp_path_factory, user_command):
    """A SimpleCNN trained on an ImageFolder of 3 colours of 16x16 RGB photos (the model of
    tests/training/test_checkpoint_data.py); returns (photos folder, work folder, checkpoint)."""
    root = colour_photos(tmp_path_factory.mktemp("photos"), per_class=20)
    work = tmp_path_factory.mktemp("run")
    train = ["-m", "lightning_cls.train", "data=imagefolder", f"data.root={root}",
             "data.image_size=16", "data.batch_size=12", "data.val_size=0.2", "data.test_size=0.2",
             "model=simplecnn", "seed=7", "trainer.max_epochs=2", "prediction_mosaic=false",
             *QUIET_TRAINER, "hydra.run.dir=train"]  # fmt: skip
    proc = user_command(train, work)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (ckpt,) = (work / "train" / "checkpoints").glob("*/epoch*.ckpt")
    return root / "train", work, ckpt


def test_a_checkpoint_trained_on_colour_photos_explains_them_as_it_was_trained(
    photo_ckpt, user_command
):
    """explain composes no ``data``: the checkpoint's own input description (3 channels,
    16 px, the folder's ImageNet mean/std) reads ``inputs``, so no ``data=...`` is needed
    and the digits default never enters (issue 39, item 8). The maps are the photos' size and
    each listed probability is the model's on the photo normalised as in training. (Mutation
    checked by hand: the explainer normalising with mean 0.5/std 0.25 is off by 0.05.)"""
    root, work, ckpt = photo_ckpt
    proc = user_command(["-m", "lightning_cls.explain", f"ckpt_path={ckpt}", f"inputs={root}",
                         "output=maps", "scale=2", "hydra.run.dir=explained"], work)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(work / "maps" / "explanations.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 60
    right = sum(row["predicted"] == Path(row["file"]).parent.name for row in rows)
    assert right / len(rows) > 0.6, right  # 3 colours: chance is 1/3
    overlay = Image.open(work / "maps" / rows[0]["overlay"])
    assert overlay.mode == "RGB" and overlay.size == (32, 32)  # 16 px x scale=2
    # Each probability is the model's on the photo normalised with the checkpoint's mean/std.
    import torch

    from lightning_cls.data.imagefolder import IMAGENET_MEAN, IMAGENET_STD
    from lightning_cls.inference import load_torch_model
    from lightning_cls.inference.spec import normalize

    net, spec = load_torch_model(ckpt)
    assert (spec.mean, spec.std, spec.num_channels) == (IMAGENET_MEAN, IMAGENET_STD, 3)
    photos = [np.asarray(Image.open(row["file"])) for row in rows]
    images = torch.from_numpy(np.stack(photos)).permute(0, 3, 1, 2)  # (B, 3, 16, 16) uint8
    with torch.no_grad():
        probs = net(normalize(images, spec.mean, spec.std)).softmax(1)
    labels = [spec.classes.index(row["label"]) for row in rows]
    expected = probs[torch.arange(len(rows)), labels]
    listed = torch.tensor([float(row["prob"]) for row in rows])
    torch.testing.assert_close(listed, expected, atol=2e-6, rtol=0)
