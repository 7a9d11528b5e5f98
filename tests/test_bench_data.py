"""bench_data: the packaged config composes, both pipelines run, figures add up."""

import json

import pytest
from hydra import compose, initialize_config_dir

from lightning_cls import config_dir
from lightning_cls.bench_data import bench


@pytest.mark.parametrize("pipeline", ["tensor", "pil"])
def test_bench_counts_images_of_each_pipeline(pipeline):
    overrides = [
        "data=synthetic",
        f"data.pipeline={pipeline}",
        "data.batch_size=32",
        "epochs=2",
        "warmup_batches=1",
        "max_batches=3",
    ]
    with initialize_config_dir(config_dir(), version_base="1.3"):
        cfg = compose("bench_data", overrides=overrides)
    result = bench(cfg)
    assert result["pipeline"] == pipeline and result["batch_size"] == 32
    assert result["images"] == 2 * 3 * 32 and result["img_s"] > 0


def test_command_prints_json_last(tmp_path, fork_server, fork_env):
    # `python -m lightning_cls.bench_data ...` as typed, forked from the pre-imported server.
    argv = ["-m", "lightning_cls.bench_data", "data=synthetic", "epochs=1", "max_batches=2"]
    out = fork_server.run([*argv, f"hydra.run.dir={tmp_path}"], tmp_path, fork_env, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["task"] == "bench_data" and result["images"] == 2 * 64


@pytest.mark.parametrize("pipeline", ["tensor", "pil"])
def test_photo_case_random_resized_crops_at_the_image_size(tmp_path, pipeline):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        (tmp_path / "photos" / "train" / cls).mkdir(parents=True)
        for i in range(12):
            pixels = rng.integers(0, 256, (30, 45, 3), dtype=np.uint8)  # landscape "photos"
            Image.fromarray(pixels).save(tmp_path / "photos" / "train" / cls / f"{i}.jpg")
    overrides = [
        "data=imagefolder",
        f"data.root={tmp_path / 'photos'}",
        "data.cache=false",
        "data.image_size=24",
        "data.decode_size=28",
        "augment=photo",
        "data.val_size=2",
        "data.test_size=2",
        "data.batch_size=8",
        f"data.pipeline={pipeline}",
        "epochs=1",
        "warmup_batches=0",
        "max_batches=2",
    ]
    with initialize_config_dir(config_dir(), version_base="1.3"):
        cfg = compose("bench_data", overrides=overrides)
    result = bench(cfg)
    assert result["image_size"] == 24 and result["images"] == 16
    assert result["peak_rss_mb"] > 10
