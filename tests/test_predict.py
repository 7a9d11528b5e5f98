"""``python -m lightning_cls.predict``'s own options beyond the artifact: ``+conformal=alpha``
gives the sets fitted at calibration, and is refused in one line where they are not there;
``top_k`` beyond the model's classes writes no empty columns."""

from __future__ import annotations

import csv

import pytest
from PIL import Image

from helpers.hydra_configs import compose
from lightning_cls.predict import predict
from lightning_cls.training.calibration import update_checkpoint

SETS = {"method": "aps", "alpha": 0.1, "qhat": 0.9, "lam": 0.0, "k_reg": 0, "images": 100}


@pytest.fixture
def images(trained, tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    for i, image in enumerate(trained.data.splits["test"].images[:3]):
        Image.fromarray(image.permute(1, 2, 0).squeeze(-1).numpy()).save(folder / f"{i}.png")
    return folder


def _cfg(ckpt, images, tmp_path, *extra):
    args = [f"ckpt_path={ckpt}", f"inputs={images}", f"output={tmp_path}/p.csv", "device=cpu"]
    return compose("predict", [*args, *extra], tmp_path)


def test_conformal_on_a_model_without_sets_names_the_value_and_the_calibration(
    trained, images, tmp_path
):
    message = (
        rf"^conformal=0.1: {trained.ckpt} has no prediction sets, and predict does not fit them; "
        rf"fit them on validation first \(python -m lightning_cls.calibrate "
        rf"ckpt_path={trained.ckpt} conformal=0.1\)"
    )
    with pytest.raises(ValueError, match=message):
        predict(_cfg(trained.ckpt, images, tmp_path, "+conformal=0.1"))
    assert not (tmp_path / "p.csv").exists()
    with pytest.raises(ValueError, match=r"^conformal=1.5 is not strictly between 0 and 1"):
        predict(_cfg(trained.ckpt, images, tmp_path, "+conformal=1.5"))


def test_conformal_gives_the_sets_fitted_at_that_alpha_and_refuses_another(
    trained, images, tmp_path
):
    ckpt = update_checkpoint(trained.ckpt, tmp_path / "sets.ckpt", {"conformal": SETS})
    rows = predict(_cfg(ckpt, images, tmp_path, "+conformal=0.1"))
    assert len(rows) == 3 and all(row["set"] for row in rows)
    with (tmp_path / "p.csv").open() as f:
        assert all(row["set"] for row in csv.DictReader(f))
    message = (
        r"^conformal=0.05 but the prediction sets of .*sets.ckpt were fitted at conformal=0.1; "
        r"drop conformal= to use them, or refit them \(python -m lightning_cls.calibrate "
    )
    with pytest.raises(ValueError, match=message):
        predict(_cfg(ckpt, images, tmp_path, "+conformal=0.05"))


def test_the_command_ends_in_one_error_line(trained, images, tmp_path, user_command):
    argv = ["-m", "lightning_cls.predict", f"ckpt_path={trained.ckpt}", f"inputs={images}",
            "+conformal=0.1", f"hydra.run.dir={tmp_path}/run"]  # fmt: skip
    out = user_command(argv, tmp_path)
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.returncode == 1 and len(errors) == 1, out.stderr[-2000:]
    assert errors[0].startswith("error: conformal=0.1: ") and "Traceback" not in out.stderr


@pytest.mark.parametrize("top_k", [5, 2])
def test_top_k_columns_stop_at_the_number_of_classes(trained, images, tmp_path, top_k):
    """A 4-class model ranks 4 labels: top_k=5 (the default) writes label_1..4 and prob_1..4,
    every one filled, not a column that is empty in every row; top_k=2 writes 2."""
    classes = len(trained.spec.classes)
    assert classes == 4  # fewer than the default top_k=5: what the test is about
    predict(_cfg(trained.ckpt, images, tmp_path, f"top_k={top_k}"))
    with (tmp_path / "p.csv").open() as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    columns = min(top_k, classes)
    labels = [c for c in reader.fieldnames if c.startswith("label_")]
    probs = [c for c in reader.fieldnames if c.startswith("prob_")]
    assert labels == [f"label_{i + 1}" for i in range(columns)]
    assert probs == [f"prob_{i + 1}" for i in range(columns)]
    assert len(rows) == 3 and all(row[c] for row in rows for c in labels + probs)
