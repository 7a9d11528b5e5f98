"""bench_data: the packaged config composes, both pipelines run, figures add up."""

import json
import subprocess
import sys

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


def test_command_prints_json_last(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_cls.bench_data",
            "data=synthetic",
            "epochs=1",
            "max_batches=2",
            f"hydra.run.dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["task"] == "bench_data" and result["images"] == 2 * 64
