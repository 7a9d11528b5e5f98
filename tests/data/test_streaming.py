"""StreamingDataModule over litdata chunks: round trip, resume, DDP shards, bounded memory, URLs."""

import json
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

pytest.importorskip("litdata")

from helpers import make_trainer
from lightning_cls.data.base import data_fields
from lightning_cls.data.chunks import DATASET_FILE, write_streaming
from lightning_cls.data.preset import AugmentPreset
from lightning_cls.data.streaming import StreamingDataModule
from lightning_cls.data.tensor_loader import batch_generator
from lightning_cls.inference.spec import InputSpec


def _write(tmp_path, n=40, classes=("a", "b", "c"), size=8, name="stream"):
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
    labels = torch.arange(n) % len(classes)
    meta = {
        "classes": list(classes),
        "mean": [0.5] * 3,
        "std": [0.25] * 3,
        "image_size": size,
        "num_channels": 3,
    }
    splits = {"train": (images, labels), "val": (images[:10], labels[:10])}
    return write_streaming(splits, meta, tmp_path / name, chunk_bytes="4kb", progress=False), images


@pytest.mark.slow
def test_round_trip_through_the_optimize_entry_point(fork_server, fork_env, tmp_path, make_folder):
    root = make_folder(tmp_path / "imgs", "train", {"x": 6, "y": 6}, size=10)
    out = tmp_path / "chunks"
    cmd = [  # forked from the session's pre-imported server (tests/helpers/fork_runner.py)
        "-m",
        "lightning_cls.optimize_data",
        "data=imagefolder",
        f"data.root={root}",
        "data.image_size=8",
        "data.cache=false",
        "data.val_size=2",
        "data.test_size=2",
        f"out={out}",
        f"hydra.run.dir={tmp_path}/run",
    ]
    done = fork_server.run(cmd, tmp_path, fork_env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["counts"] == {"train": 8, "test": 2, "val": 2}
    dm = StreamingDataModule(str(out), batch_size=4)
    dm.setup()
    assert dm.classes == ["x", "y"] and dm.spec.image_size == 8
    seen = sum(len(y) for _, y in dm.test_dataloader())
    assert seen == 2
    again = fork_server.run(cmd, tmp_path, fork_env, timeout=300)
    assert (
        again.returncode != 0 and "already exists; remove it or choose another out=" in again.stderr
    )


def test_train_loader_serves_every_sample_once_and_augments(tmp_path):
    out, images = _write(tmp_path)
    dm = StreamingDataModule(str(out), batch_size=16, image_size=6, augment="photo")
    dm.setup()
    labels = torch.cat([y for _, y in dm.train_dataloader()])
    assert sorted(labels.tolist()) == sorted((torch.arange(40) % 3).tolist())
    x, y = next(iter(dm.train_dataloader()))
    assert x.dtype == torch.uint8 and x.shape == (16, 3, 8, 8)  # augmented after transfer
    out_x = dm.batch_augment()(x, train=True, generator=torch.Generator().manual_seed(0))
    assert out_x.shape == (16, 3, 6, 6) and out_x.dtype == torch.float32
    assert dm.spec.resize_size == 8 and dm.spec.image_size == 6


def test_mid_epoch_resume_continues_where_it_stopped(tmp_path):
    out, _ = _write(tmp_path)
    dm = StreamingDataModule(str(out), batch_size=8, seed=3)
    dm.setup()
    full = [x for x, _ in dm.train_dataloader()]
    loader = dm.train_dataloader()
    it = iter(loader)
    first = [next(it)[0] for _ in range(2)]
    state = dm.state_dict()
    resumed = StreamingDataModule(str(out), batch_size=8, seed=3)
    resumed.load_state_dict(state)
    rest = [x for x, _ in resumed.train_dataloader()]
    assert len(first) + len(rest) == len(full) == 5
    for a, b in zip(first + rest, full):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_two_ranks_read_disjoint_shards_covering_the_split(tmp_path, fork_server, fork_env):
    out, _ = _write(tmp_path, n=41)
    script = tmp_path / "rank.py"
    script.write_text(
        textwrap.dedent(f"""
        import json, os, sys, torch, torch.distributed as dist
        from lightning_cls.data.streaming import StreamingDataModule
        dist.init_process_group("gloo")
        dm = StreamingDataModule({str(out)!r}, batch_size=4, seed=1, cache_dir=None)
        ds = dm.dataset("train", shuffle=True)
        ids = [int(item["index"]) for item in ds]
        print(json.dumps(ids))
    """)
    )
    env = {**fork_env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29533", "WORLD_SIZE": "2"}

    def rank(r: int):  # two processes at once, each forked from the pre-imported server
        return fork_server.run(
            [str(script)], tmp_path, {**env, "RANK": str(r), "LOCAL_RANK": str(r)}, timeout=240
        )

    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(rank, range(2)))
    shards = []
    for p in procs:
        assert p.returncode == 0, p.stderr[-2000:]
        shards.append(json.loads(p.stdout.strip().splitlines()[-1]))
    assert set(shards[0]).isdisjoint(shards[1])
    assert sorted(shards[0] + shards[1]) == list(range(41))  # nothing dropped or duplicated


def test_object_store_url_without_credentials_is_a_clear_error(tmp_path, monkeypatch):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    dm = StreamingDataModule(
        "s3://no-such-bucket-lightning-cls/data", cache_dir=str(tmp_path / "c")
    )
    with pytest.raises(
        ConnectionError,
        match=r"Cannot read s3://no-such-bucket-lightning-cls/data/dataset\.json .*credentials",
    ):
        dm.setup()


def test_missing_folder_and_wrong_class_count(tmp_path):
    with pytest.raises(
        FileNotFoundError, match="dataset.json not found: data.input_dir must be a folder"
    ):
        StreamingDataModule(str(tmp_path / "nope")).setup()
    out, _ = _write(tmp_path)
    with pytest.raises(ValueError, match="data.num_classes=5 but .* holds 3 classes"):
        StreamingDataModule(str(out), num_classes=5).setup()


@pytest.mark.slow
def test_memory_stays_bounded_streaming_four_times_the_limit(tmp_path):
    # 5,600 incompressible 3x64x64 images: 69 MB of chunks, over 4x the 16 MiB the pass may add.
    limit = 16 * 2**20
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (5600, 3, 64, 64), dtype=torch.uint8, generator=g)
    meta = {
        "classes": ["a", "b"],
        "mean": [0.5] * 3,
        "std": [0.25] * 3,
        "image_size": 64,
        "num_channels": 3,
    }
    out = write_streaming(
        {"train": (images, torch.arange(5600) % 2)},
        meta,
        tmp_path / "big",
        chunk_bytes="2MB",
        progress=False,
    )
    del images
    on_disk = sum(f.stat().st_size for f in (out / "train").glob("*.bin"))
    assert on_disk >= 4 * limit
    script = textwrap.dedent(f"""
        import json, torch
        from lightning_cls.data.streaming import StreamingDataModule

        def rss():
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS"))

        dm = StreamingDataModule(
            {str(out)!r}, batch_size=64, image_size=56, augment={{"random_resized_crop": True}}
        )
        dm.setup()
        augment = dm.batch_augment()
        loader = dm.train_dataloader()
        it = iter(loader)
        x, _ = next(it)
        augment(x, train=True)
        base, peak, n = rss(), 0, len(x)
        for x, _ in it:
            augment(x, train=True)
            n += len(x)
            peak = max(peak, rss())
        print(json.dumps({{"growth": peak - base, "images": n}}))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["images"] == 5600
    assert result["growth"] < limit, result


def test_the_description_is_dataset_json_and_the_old_meta_json_is_still_read(tmp_path):
    out, images = _write(tmp_path)
    assert sorted(p.name for p in out.iterdir()) == [DATASET_FILE, "train", "val"]
    described = json.loads((out / DATASET_FILE).read_text())
    assert described["counts"] == {"train": 40, "val": 10} and described["classes"] == list("abc")
    (out / DATASET_FILE).rename(out / "meta.json")  # a folder written before issue 25
    old = StreamingDataModule(str(out), batch_size=8)
    old.setup()
    assert old.classes == ["a", "b", "c"] and torch.equal(old.splits["train"].images, images)
    # an exported model's meta.json (an input spec, no split counts) is named as such
    (out / "meta.json").write_text(json.dumps({"classes": ["a"], "image_size": 8}))
    with pytest.raises(ValueError, match=r"meta.json is not a dataset description .*optimize_data"):
        StreamingDataModule(str(out)).setup()


def test_spec_is_an_input_spec_that_passes_the_data_keys(tmp_path):
    out, _ = _write(tmp_path)
    dm = StreamingDataModule(str(out), image_size=6)
    spec = dm.spec
    assert isinstance(spec, InputSpec) and spec.input_shape == (3, 6, 6)
    assert data_fields(spec) == {
        "classes": ["a", "b", "c"],
        "mean": [0.5] * 3,
        "std": [0.25] * 3,
        "image_size": 6,
        "num_channels": 3,
        "resize_size": 8,
    }
    assert spec == InputSpec(**data_fields(spec))


def test_streamed_batches_go_through_the_base_batch_hook(tmp_path):
    """One batch hook for every source: a streamed uint8 batch (no key) is augmented with
    draws seeded from the trainer's epoch, step and rank, in trainer.precision's dtype."""
    out, _ = _write(tmp_path)
    dm = StreamingDataModule(str(out), batch_size=8, augment="airbench", seed=7)
    dm.setup()
    x, y = next(iter(dm.train_dataloader()))
    dm.trainer = make_trainer(precision="bf16-true")
    dm.trainer.training = True
    a, y_a = dm.on_after_batch_transfer((x, y), 0)
    b, _ = dm.on_after_batch_transfer((x, y), 0)
    assert a.dtype == torch.bfloat16 and a.shape == (8, 3, 8, 8) and torch.equal(y_a, y)
    assert torch.equal(a, b)  # the same step draws the same crops and flips
    expected = dm.batch_augment(torch.bfloat16)(
        x, train=True, generator=batch_generator(7, 0, 0, 0)
    )
    assert torch.equal(a, expected)
    dm.trainer.training = False
    plain, _ = dm.on_after_batch_transfer((x, y), 0)
    assert torch.equal(plain, dm.batch_augment(torch.bfloat16)(x, train=False))


def test_wrong_channel_count_is_named(tmp_path):
    out, _ = _write(tmp_path)
    with pytest.raises(ValueError, match=r"data.num_channels=1 but .* holds 3-channel images"):
        StreamingDataModule(str(out), num_channels=1).setup()


def test_splits_follow_the_in_memory_contract(tmp_path, caplog):
    """INT8 calibration, export=auto and stats read ``datamodule.splits`` (issue 19: an
    AttributeError before); without a stored val split, "val" is the test split."""
    g = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (30, 1, 6, 6), dtype=torch.uint8, generator=g)
    labels = torch.arange(30) % 2
    meta = {"classes": ["a", "b"], "mean": [0.5], "std": [0.25], "image_size": 6, "num_channels": 1}
    splits = {"train": (images, labels), "test": (images[:8], labels[:8])}
    out = write_streaming(splits, meta, tmp_path / "s", chunk_bytes="1kb", progress=False)
    dm = StreamingDataModule(str(out))
    dm.setup()
    assert list(dm.splits) == ["train", "val", "test"]
    train = dm.splits["train"]
    assert train.images.dtype == torch.uint8 and train.images.shape == (30, 1, 6, 6)
    assert torch.equal(train.images, images) and torch.equal(train.labels, labels)
    assert torch.equal(dm.splits["val"].images, images[:8])
    capped = StreamingDataModule(str(out), max_split_images=12)
    capped.setup()
    with caplog.at_level("WARNING"):
        sample = capped.splits["train"]
    assert len(sample) == 12 and "reading 12 of the 30 images of split 'train'" in caplog.text
    rows = {tuple(x.flatten().tolist()): int(y) for x, y in zip(images, labels)}
    assert all(
        rows[tuple(x.flatten().tolist())] == int(y) for x, y in zip(sample.images, sample.labels)
    )


def test_stats_command_reads_the_streamed_train_split(tmp_path, capsys, monkeypatch):
    import gc
    import tempfile

    from helpers.hydra_configs import compose
    from lightning_cls.data.stats import channel_stats
    from lightning_cls.stats import stats

    out, images = _write(tmp_path)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the per-run cache goes
    result = stats(compose("stats", ["data=streaming", f"data.input_dir={out}"], tmp=tmp_path))
    mean, std = channel_stats(images)
    # One approx per list: pytest >= 9.2 refuses approx over nested dictionaries.
    assert sorted(result) == ["mean", "std"]
    assert result["mean"] == pytest.approx(mean) and result["std"] == pytest.approx(std)
    assert "train split (40 images)" in capsys.readouterr().out
    gc.collect()
    assert list(scratch.iterdir()) == []  # no cache folder left behind without a teardown


@pytest.mark.slow
def test_train_with_the_default_model_and_int8_export_from_chunks(tmp_path, fork_server, fork_env):
    """`python -m lightning_cls.train data=streaming data.input_dir=DIR` as documented: the
    default model takes the stored image size and channels (null in conf/data/streaming.yaml)
    from meta.json, and INT8 export calibrates on the streamed splits. Before issue 19 this
    ended in "unsupported operand type(s) for %: 'NoneType' and 'int'"."""
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (48, 1, 12, 12), dtype=torch.uint8, generator=g)
    labels = torch.arange(48) % 3
    meta = {
        "classes": list("abc"),
        "mean": [0.5],
        "std": [0.25],
        "image_size": 12,
        "num_channels": 1,
    }
    splits = {"train": (images, labels), "test": (images[:12], labels[:12])}
    out = write_streaming(splits, meta, tmp_path / "chunks", chunk_bytes="4kb", progress=False)
    run = tmp_path / "run"
    cmd = [
        "-m",
        "lightning_cls.train",
        "data=streaming",
        f"data.input_dir={out}",
        "data.batch_size=16",
        "trainer.max_epochs=1",
        "trainer.enable_progress_bar=false",
        "export=int8",
        f"hydra.run.dir={run}",
    ]
    done = fork_server.run(cmd, tmp_path, fork_env, timeout=600)  # as typed, pre-imported
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((run / "results.json").read_text())
    hparams = torch.load(results["best_ckpt"], map_location="cpu", weights_only=True)[
        "hyper_parameters"
    ]
    assert hparams["image_size"] == 12 and hparams["num_channels"] == 1
    assert {
        k: hparams["model_kwargs"][k] for k in ("image_size", "in_channels", "num_classes")
    } == {
        "image_size": 12,
        "in_channels": 1,
        "num_classes": 3,
    }
    report = json.loads((run / "export" / "quantization_report.json").read_text())
    assert report and all(r["accepted"] for r in report)
    assert (run / "export" / "model_int8.onnx").is_file()


@pytest.mark.slow
def test_export_auto_calibrates_and_scores_on_streamed_splits(trained, tmp_path):
    """export=auto reads datamodule.splits: the trained fixture's data written as chunks
    gives the same eager accuracy as the in-memory DataModule (an AttributeError before)."""
    from lightning_cls.export.auto import AutoConfig, export_auto
    from lightning_cls.inference import Predictor

    data = trained.data
    data.setup("fit")
    splits = {name: (s.images, s.labels) for name, s in data.splits.items()}
    out = write_streaming(splits, data_fields(data.spec), tmp_path / "chunks", progress=False)
    dm = StreamingDataModule(str(out))
    cfg = AutoConfig(rounds=1, window_s=0.05, calibration_batches=1, threads=1)
    result = export_auto(trained.net, trained.spec, tmp_path / "auto", dm, cfg)
    assert result.path.is_file() and result.winner in result.measurements
    saved = json.loads((tmp_path / "auto" / "auto_selection.json").read_text())
    val = data.splits["val"]
    eager = Predictor(trained.net, trained.spec).accuracy(val.images, val.labels)
    assert saved["eager_val_acc"] == pytest.approx(eager)


def test_stronger_augmentation_applies_and_unsupported_options_are_named(tmp_path):
    out, _ = _write(tmp_path)
    plain = StreamingDataModule(str(out), batch_size=8, augment="none")
    strong = StreamingDataModule(
        str(out),
        batch_size=8,
        augment=AugmentPreset(auto_augment="randaugment", random_erasing=1.0),
    )
    plain.setup()
    strong.setup()
    x, _ = next(iter(plain.train_dataloader()))  # (8, 3, 8, 8) uint8
    g = torch.Generator().manual_seed(0)
    a = plain.batch_augment()(x, train=True, generator=g)
    b = strong.batch_augment()(x, train=True, generator=torch.Generator().manual_seed(0))
    assert strong.batch_augment().auto_augment == "randaugment"
    assert a.shape == b.shape and not torch.equal(a, b)  # the setting is not ignored
    with pytest.raises(ValueError, match=r"data.folds=5 is not supported with data=streaming"):
        StreamingDataModule(str(out), folds=5)
    with pytest.raises(
        ValueError, match=r"balanced_sampler=true is not supported .* task.class_weights=auto"
    ):
        StreamingDataModule(str(out), balanced_sampler=True)
