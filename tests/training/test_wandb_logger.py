"""logger=wandb offline: no account, no network; the run folder holds the config and metrics."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from helpers.hydra_configs import QUIET_TRAINER, compose
from lightning_cls.train import train
from lightning_cls.training.loggers import WandbLogger, close_loggers

wandb = pytest.importorskip("wandb")
from wandb.proto import wandb_internal_pb2  # noqa: E402  (after the importorskip)

_BLOCK = 32768  # a .wandb file is a LevelDB log: 32 KiB blocks of records with 7-byte headers
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def read_wandb_file(path: Path) -> list[wandb_internal_pb2.Record]:
    """The records of an offline run's ``run-<id>.wandb`` (what ``wandb sync`` uploads)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    records, pending, pos = [], b"", 7  # the file header: ":W&B", magic, version
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:  # zero padding up to the block's end
            pos += left
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        pending = chunk if kind in (_FULL, _FIRST) else pending + chunk
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def run_config(records: list[wandb_internal_pb2.Record]) -> dict:
    """The run's config after every update in the log (the run record's own, then each config
    record's), as a nested dict; an update names its key flat or as a nested path."""
    config: dict = {}
    updates = [
        item
        for r in records
        for item in (
            r.run.config.update
            if r.WhichOneof("record_type") == "run"
            else r.config.update
            if r.WhichOneof("record_type") == "config"
            else []
        )
    ]
    for item in updates:
        *parents, leaf = list(item.nested_key) or [item.key]
        node = config
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = json.loads(item.value_json)
    return config


@pytest.fixture
def wandb_offline(monkeypatch, tmp_path):
    """Offline mode, with W&B's settings and caches in the test's folder."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb_home"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield
    if wandb.run is not None:  # a failed test must not leave its run to the next one
        wandb.finish()
    wandb.teardown()  # W&B caches its settings (the mode too) per process until torn down


def _run_folder(output_dir: Path) -> Path:
    (folder,) = (output_dir / "wandb").glob("offline-run-*")
    return folder


def _finished_run_log(output_dir: Path) -> list[wandb_internal_pb2.Record]:
    """The records of the one offline run under ``output_dir``, once W&B has written them all.

    ``run.finish()`` returns when the service has the run's last record, not when the file has
    it: wandb-core writes the ``.wandb`` file through a buffer that it flushes when it closes the
    run's stream, after ``finish()`` has returned. Loaded, a read right after ``finish()`` found
    the bare 7-byte header. ``wandb.teardown()`` waits for the service process to exit, which
    closes every stream first (what a training command's exit does through W&B's atexit hook).
    """
    wandb.teardown()
    (log_file,) = _run_folder(output_dir).glob("run-*.wandb")
    records = read_wandb_file(log_file)
    kinds = [r.WhichOneof("record_type") for r in records]
    assert kinds[-1:] == ["exit"], kinds  # the whole run: finish() writes the exit record last
    return records


def test_offline_run_holds_the_resolved_config_and_metrics(wandb_offline, tmp_path):
    overrides = [
        *QUIET_TRAINER,
        "logger=[csv,wandb]",
        "trainer.max_epochs=1",
        "optimizer.lr=0.0025",
        "~callbacks.plots",
    ]
    summary = train(compose(overrides=overrides, tmp=tmp_path))
    assert wandb.run is None  # train() finished its run
    records = _finished_run_log(tmp_path / "run")

    config = run_config(records)
    # The whole resolved config, as the CSV/MLflow/TensorBoard loggers get it.
    kinds = [r.WhichOneof("record_type") for r in records]
    assert "optimizer" in config, (sorted(config), kinds)  # what the log held, if not
    assert config["optimizer"]["lr"] == 0.0025
    assert config["experiment_name"] == "digits_simplecnn"
    assert config["model"]["name"] == "simplecnn"
    assert config["paths"]["output_dir"] == str(tmp_path / "run")  # resolved, not ${...}

    history = [
        {
            tuple(item.nested_key) or (item.key,): json.loads(item.value_json)
            for item in r.history.item
        }
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    val_acc = [row[("val/acc",)] for row in history if ("val/acc",) in row]
    assert val_acc and val_acc[-1] == pytest.approx(summary["val_last"]["val/acc"])
    test_acc = [row[("test/acc",)] for row in history if ("test/acc",) in row]
    assert test_acc == [pytest.approx(summary["test"]["test/acc"])]


def test_a_run_left_open_is_finished_before_the_next_starts(wandb_offline, tmp_path):
    # A Hydra multirun with the basic launcher runs its jobs one after another in one process;
    # Lightning's own WandbLogger would log the second job into the first job's run.
    first = WandbLogger(save_dir=str(tmp_path / "a"), project="lightning-cls")
    first.log_metrics({"val/acc": 0.5}, step=0)  # left open, as by a crashed job
    second = WandbLogger(save_dir=str(tmp_path / "b"), project="lightning-cls")
    second.log_metrics({"val/acc": 0.75}, step=0)
    assert second.experiment.id != first.experiment.id
    assert wandb.run is second.experiment
    close_loggers([second])
    assert wandb.run is None
    assert _run_folder(tmp_path / "a") and _run_folder(tmp_path / "b")


def test_online_without_a_login_is_a_one_line_error(wandb_offline, monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "online")
    logger = WandbLogger(save_dir=str(tmp_path), project="lightning-cls")
    with pytest.raises(
        ValueError, match=r"logger=wandb cannot start a W&B run: .*WANDB_MODE=offline"
    ):
        logger.log_hyperparams({"seed": 1})


@pytest.mark.slow
def test_two_process_ddp_logs_one_offline_run(wandb_offline, tmp_path):
    # trainer=ddp_sim spawns fit into two new processes; the parent starts the run and logs
    # the config, the spawned rank 0 logs the metrics into that same run (test=false: a test
    # spawn attaches to it the same way).
    overrides = [
        "trainer=ddp_sim",
        *QUIET_TRAINER[2:],
        "logger=wandb",
        "trainer.max_epochs=1",
        "+trainer.limit_train_batches=3",
        "+trainer.limit_val_batches=2",
        "optimizer.lr=0.0025",
        "~callbacks.plots",
        "~callbacks.model_weights",
        "test=false",
    ]
    summary = train(compose(overrides=overrides, tmp=tmp_path))
    assert wandb.run is None
    assert summary["val"]["val/acc"] > 0 and summary["best_ckpt"]  # fit finished
    runs = sorted(p.name for p in (tmp_path / "run" / "wandb").glob("*run-*"))
    assert len(runs) == 1, runs  # not one per process (2 if the spawn started its own)
    records = _finished_run_log(tmp_path / "run")
    config = run_config(records)
    assert config["optimizer"]["lr"] == 0.0025, sorted(config)
    assert config["trainer"]["strategy"] == "ddp_spawn"
    assert config["paths"]["output_dir"] == str(tmp_path / "run")
    history = [
        {tuple(i.nested_key) or (i.key,): json.loads(i.value_json) for i in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    assert any(("train/loss_epoch",) in row for row in history)  # logged by the fit spawn
    val_acc = [row[("val/acc",)] for row in history if ("val/acc",) in row]
    assert val_acc and val_acc[-1] == pytest.approx(summary["val_last"]["val/acc"])
