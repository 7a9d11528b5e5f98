"""Commands given a checkpoint use the data it was trained on (the run's saved config): a model
trained on a folder of colour photos is calibrated and evaluated without repeating data=...;
an explicit data= still wins, and a mismatch is one line naming both sides."""

from __future__ import annotations

import json

import pytest

from helpers import colour_photos
from helpers.hydra_configs import QUIET_TRAINER


@pytest.fixture(scope="module")
def photo_run(tmp_path_factory, user_command):
    """A SimpleCNN trained one epoch on an ImageFolder of 3 colours of 16x16 RGB photos."""
    root = colour_photos(tmp_path_factory.mktemp("photos"), per_class=30)
    work = tmp_path_factory.mktemp("run")
    train = ["-m", "lightning_cls.train", "data=imagefolder", f"data.root={root}",
             "data.image_size=16", "data.batch_size=16", "data.val_size=0.2", "data.test_size=0.2",
             "data.mean=[0.5,0.5,0.5]", "data.std=[0.25,0.25,0.25]", "model=simplecnn",
             "seed=7", "trainer.max_epochs=2", "prediction_mosaic=false", *QUIET_TRAINER,
             "hydra.run.dir=train"]  # fmt: skip
    proc = user_command(train, work)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (ckpt,) = (work / "train" / "checkpoints").glob("*/epoch*.ckpt")
    return work, ckpt


def test_calibrate_and_eval_take_the_checkpoint_s_own_data(photo_run, user_command):
    work, ckpt = photo_run
    proc = user_command(["-m", "lightning_cls.calibrate", f"ckpt_path={ckpt}", "reject=msp",
                         "hydra.run.dir=calibrated"], work)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "From the training run's config" in proc.stdout + proc.stderr
    assert "data=imagefolder, seed=7" in proc.stdout + proc.stderr
    report = json.loads((work / "calibrated" / "results.json").read_text())["calibration"]
    # the run's own validation carve, stratified: 20% of each colour's 24 left after test, 5 x 3
    assert report["images"] == 15
    assert report["reject"]["score"] == "msp"
    proc = user_command(["-m", "lightning_cls.eval", f"ckpt_path={ckpt}",
                         "prediction_mosaic=false", *QUIET_TRAINER[:4], "hydra.run.dir=ev"], work)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((work / "ev" / "results.json").read_text())
    assert results["test"]["test/acc"] > 0.5  # 3 colours, chance 1/3


def test_an_explicit_data_wins_and_a_mismatch_names_both(photo_run, user_command):
    work, ckpt = photo_run
    proc = user_command(["-m", "lightning_cls.calibrate", f"ckpt_path={ckpt}", "data=digits",
                         "hydra.run.dir=wrong"], work)  # fmt: skip
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()[-1:]
    assert line.startswith("error: ") and "num_channels=3" in line and "num_channels=1" in line
