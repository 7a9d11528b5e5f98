"""The entry points end to end on the embedded digits data: train → eval → predict."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from helpers.hydra_configs import QUIET_TRAINER, compose
from lightning_cls.data import DigitsDataModule
from lightning_cls.eval import evaluate
from lightning_cls.predict import predict
from lightning_cls.train import _resume_from, per_device_batch_size, train

# A single run's folder, laid out as hydra.run.dir lays it out (outputs/<task>/<date>/<time>).
RUN = "outputs/train/2026-01-01/00-00-00"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The default training, exactly as `python -m lightning_cls.train` runs it (quiet)."""
    tmp = tmp_path_factory.mktemp("train")
    summary = train(compose(overrides=[*QUIET_TRAINER, f"paths.output_dir={tmp}/{RUN}"], tmp=tmp))
    return tmp, summary


def test_default_training_reaches_high_accuracy(trained):
    tmp, summary = trained
    # README's "> 95% test acc" for `make train` (this config; 0.972 measured). Chance is 0.10.
    assert summary["test"]["test/acc"] > 0.95
    assert Path(summary["best_ckpt"]).is_file()
    results = json.loads((tmp / RUN / "results.json").read_text())
    assert results["test"] == pytest.approx(summary["test"])
    assert results["best_ckpt"] == summary["best_ckpt"] and results["wall_time_s"] > 0
    assert "name: simplecnn" in (tmp / RUN / "config_resolved.yaml").read_text()
    # Checkpoints live inside the run's own folder, under the experiment's name.
    assert Path(summary["best_ckpt"]).parent == tmp / RUN / "checkpoints" / "digits_simplecnn"
    # main() returns the best val/acc of the run (optimized_metric) to sweepers.
    assert summary["objective"] == pytest.approx(summary["best_val_acc"])
    # `val`: the tested (best) checkpoint's validation metrics, read from it; the last epoch's
    # beside them (issue 56: they were the last epoch's, beside the best checkpoint's test).
    assert results["val_of"] == "best_ckpt" and set(results["val_last"]) == set(results["val"])
    assert results["val"]["val/acc"] == pytest.approx(results["best_val_acc"])
    # The whole config reached the loggers (hparams.yaml of the CSV logger).
    hparams = (tmp / RUN / "csv" / "hparams.yaml").read_text()
    assert "optimizer:" in hparams and "experiment_name: digits_simplecnn" in hparams


def test_eval_reproduces_test_metric(trained, tmp_path):
    _, summary = trained
    cfg = compose("eval", [f"ckpt_path={summary['best_ckpt']}", *QUIET_TRAINER[:4]], tmp=tmp_path)
    metrics = evaluate(cfg)
    assert metrics["test/acc"] == pytest.approx(summary["test"]["test/acc"], abs=1e-4)
    assert metrics["test/loss"] == pytest.approx(summary["test"]["test/loss"], abs=1e-4)


def test_eval_of_the_run_folder_is_eval_of_its_best_checkpoint(trained, tmp_path):
    """ckpt_path=<run folder>: the best checkpoint its results.json names (issue 56)."""
    tmp, summary = trained
    cfg = compose("eval", [f"ckpt_path={tmp / RUN}", *QUIET_TRAINER[:4]], tmp=tmp_path)
    metrics = evaluate(cfg)
    assert metrics["test/acc"] == pytest.approx(summary["test"]["test/acc"], abs=1e-4)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["ckpt_path"] == summary["best_ckpt"]


def test_eval_on_the_val_split_reproduces_the_best_val_metric(trained, tmp_path):
    _, summary = trained
    overrides = [f"ckpt_path={summary['best_ckpt']}", "split=val", *QUIET_TRAINER[:4]]
    metrics = evaluate(compose("eval", overrides, tmp=tmp_path))
    assert metrics["val/acc"] == pytest.approx(summary["best_val_acc"], abs=1e-4)
    # The run's results.json holds this checkpoint's validation metrics, every one of them.
    assert metrics == pytest.approx(summary["val"], abs=1e-4)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["split"] == "val" and results["val"] == pytest.approx(metrics)


def test_eval_tta_overrides_change_the_evaluation_and_are_recorded(trained, tmp_path):
    _, summary = trained
    ckpt = f"ckpt_path={summary['best_ckpt']}"
    cfg = compose("eval", [ckpt, "tta_flip=true", "tta_translate=1", *QUIET_TRAINER[:4]], tmp_path)
    metrics = evaluate(cfg)
    # Averaging each digit's logits with its mirror's and shifted copies' changes the loss.
    assert metrics["test/loss"] != pytest.approx(summary["test"]["test/loss"], abs=1e-4)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert (results["tta_flip"], results["tta_translate"]) == (True, 1)
    bad = compose("eval", [ckpt, "tta_translate=-1", *QUIET_TRAINER[:4]], tmp=tmp_path)
    with pytest.raises(ValueError, match=r"tta_translate=-1 is not a pixel shift; use an int >= 0"):
        evaluate(bad)
    bad = compose("eval", [ckpt, "split=train", *QUIET_TRAINER[:4]], tmp=tmp_path)
    with pytest.raises(ValueError, match=r"split='train' is not evaluable; use split=test or"):
        evaluate(bad)


def test_predict_writes_correct_csv(trained, tmp_path):
    _, summary = trained
    dm = DigitsDataModule()
    dm.setup()
    test = dm.splits["test"]
    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(20):
        Image.fromarray(test.images[i, 0].numpy()).save(folder / f"{i:02d}.png")
    (folder / "broken.png").write_bytes(b"not a png")
    out = tmp_path / "pred.csv"
    cfg = compose(
        "predict",
        [f"ckpt_path={summary['best_ckpt']}", f"inputs={folder}", f"output={out}", "top_k=3"],
        tmp=tmp_path,
    )
    predict(cfg)
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 21
    good = [r for r in rows if not r["error"]]
    correct = sum(r["label_1"] == str(int(test.labels[int(Path(r["file"]).stem)])) for r in good)
    assert correct >= 17  # the model is > 90% accurate on these test images
    for r in good:
        probs = [float(r[f"prob_{k}"]) for k in (1, 2, 3)]
        assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-5
    broken = [r for r in rows if r["error"]]
    assert [Path(r["file"]).name for r in broken] == ["broken.png"]
    assert broken[0]["error"] == "not a readable image"


def test_load_from_checkpoint_without_hydra(trained):
    _, summary = trained
    code = f"""
import sys, torch
from lightning_cls.module import ClassificationModule
m = ClassificationModule.load_from_checkpoint({summary["best_ckpt"]!r})  # torch's default weights_only
assert m.net(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
assert m.hparams.classes[3] == '3' and m.hparams.mean == [0.3057]
print('hydra' in sys.modules, 'omegaconf' in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "False"]


def test_resume_last_continues_the_latest_run(trained, tmp_path):
    tmp, summary = trained
    # Resume a copy: the resumed run writes (and prunes, save_top_k=1) its checkpoint folder,
    # which must not touch the best checkpoint the other tests read from the fixture.
    shutil.copytree(tmp / RUN, tmp_path / RUN)
    resume = ["ckpt_path=last", "trainer.max_epochs=21", "test=false"]
    overrides = [*QUIET_TRAINER, *resume, f"paths.output_dir={tmp_path}/resumed"]
    resumed = train(compose(overrides=overrides, tmp=tmp_path))
    metrics_csv = tmp_path / "resumed" / "csv" / "metrics.csv"
    epochs = {int(r["epoch"]) for r in csv.DictReader(metrics_csv.open()) if r["epoch"]}
    assert epochs == {20}, "a resumed 20-epoch run trains only epoch 21 (index 20)"
    assert resumed["val"]["val/acc"] > 0.9
    # The resumed run keeps writing into the folder of the run it continues.
    assert Path(resumed["best_ckpt"]).parent == tmp_path / RUN / "checkpoints" / "digits_simplecnn"
    assert Path(summary["best_ckpt"]).is_file()


def test_resume_last_without_runs_is_a_clear_error(tmp_path):
    cfg = compose(overrides=[*QUIET_TRAINER, "ckpt_path=last"], tmp=tmp_path)
    with pytest.raises(
        FileNotFoundError, match=r"ckpt_path=last but no last\.ckpt exists under .*outputs/train"
    ):
        train(cfg)


def test_resume_last_ignores_other_experiments_and_sweep_jobs(trained, tmp_path):
    tmp = tmp_path  # decoys go next to a copy, not into the shared fixture's folder
    shutil.copytree(trained[0] / RUN, tmp / RUN)
    # Another experiment's runs and this experiment's sweep jobs sit next to each other...
    other = tmp / "outputs/train/2026-01-02/00-00-00/checkpoints/digits_mlp/last.ckpt"
    sweep_job = (
        tmp / "outputs/train/multirun/2026-01-03/00-00-00/0/checkpoints/digits_simplecnn/last.ckpt"
    )
    for path in (other, sweep_job):
        path.parent.mkdir(parents=True)
        path.write_bytes(b"not resumed")
    cfg = compose(overrides=[*QUIET_TRAINER, "ckpt_path=last"], tmp=tmp)
    assert _resume_from(cfg) == str(tmp / RUN / "checkpoints/digits_simplecnn/last.ckpt")


def test_a_restarted_job_resumes_its_own_last_checkpoint(trained, tmp_path):
    tmp, _ = trained
    own = compose(overrides=[*QUIET_TRAINER, f"paths.output_dir={tmp}/{RUN}"], tmp=tmp)
    assert _resume_from(own) == str(tmp / RUN / "checkpoints/digits_simplecnn/last.ckpt")
    fresh = compose(overrides=QUIET_TRAINER, tmp=tmp_path)
    assert _resume_from(fresh) is None
    off = compose(
        overrides=[*QUIET_TRAINER, f"paths.output_dir={tmp}/{RUN}", "auto_resume=false"], tmp=tmp
    )
    assert _resume_from(off) is None


def test_global_batch_size_must_split_over_processes():
    assert per_device_batch_size(64, 2) == 32 and per_device_batch_size(7, 1) == 7
    with pytest.raises(
        ValueError, match=r"data.batch_size=65 is the global batch .* over 2 processes"
    ):
        per_device_batch_size(65, 2)


def test_unknown_model_from_the_command_line(tmp_path):
    cfg = compose(overrides=[*QUIET_TRAINER, "model=custom", "model.name=simplecnnn"], tmp=tmp_path)
    with pytest.raises(ValueError, match="Unknown model 'simplecnnn'. Did you mean 'simplecnn'"):
        train(cfg)


def _run(server, env: dict, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m ARGS`` as typed, forked from the pre-imported server (tests/conftest.py)."""
    proc = server.run(["-m", *args], cwd, env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_multirun_gives_one_directory_per_job(fork_server, fork_env, tmp_path):
    _run(
        fork_server,
        fork_env,
        [
            "lightning_cls.train",
            "-m",
            "model=simplecnn,mlp",
            "trainer.max_epochs=1",
            "+trainer.limit_train_batches=2",  # what is checked is the jobs' folders
            "trainer.enable_progress_bar=false",
            "~callbacks.progress_bar",
            "~callbacks.plots",
            "prediction_mosaic=false",
            f"paths.root_dir={tmp_path}",
            f"hydra.sweep.dir={tmp_path}/sweep",
        ],
        cwd=tmp_path,
    )
    results = sorted((tmp_path / "sweep").glob("*/results.json"))
    assert [p.parent.name for p in results] == ["0", "1"]
    models = [json.loads(p.read_text())["overrides"] for p in results]
    assert ["model=simplecnn" in m for m in models] == [True, False]
    assert ["model=mlp" in m for m in models] == [False, True]


@pytest.mark.slow
def test_command_line_as_documented(fork_server, fork_env, tmp_path):
    proc = _run(
        fork_server,
        fork_env,
        [
            "lightning_cls.train",
            "model=simplecnn",
            "trainer.devices=1",
            "trainer.max_epochs=2",
            f"paths.root_dir={tmp_path}",
        ],
        cwd=tmp_path,
    )
    assert "Best checkpoint:" in proc.stderr + proc.stdout
    assert list((tmp_path / "outputs" / "train").glob("*/*/results.json"))


def test_train_false_tests_the_given_checkpoint(trained, tmp_path):
    _, summary = trained
    cfg = compose(
        overrides=[*QUIET_TRAINER, "train=false", f"ckpt_path={summary['best_ckpt']}"], tmp=tmp_path
    )
    result = train(cfg)
    assert result["test"]["test/acc"] == pytest.approx(summary["test"]["test/acc"], abs=1e-4)


def test_eval_refuses_data_with_other_classes(trained, tmp_path):
    _, summary = trained
    cfg = compose(
        "eval",
        [
            f"ckpt_path={summary['best_ckpt']}",
            "data=synthetic",
            "data.num_channels=1",
            "data.image_size=8",
            *QUIET_TRAINER[:4],
        ],
        tmp=tmp_path,
    )
    with pytest.raises(
        ValueError,
        match=r"trained on other data: classes differ \(10 classes vs 10 in data=synthetic, only in the model: \[0, 1, .*only in data=synthetic: \[class_0",
    ):
        evaluate(cfg)


def test_eval_missing_checkpoint_names_the_path(tmp_path):
    cfg = compose("eval", [f"ckpt_path={tmp_path}/nope.ckpt", *QUIET_TRAINER[:4]], tmp=tmp_path)
    with pytest.raises(FileNotFoundError, match=r"Checkpoint not found: ckpt_path='.*nope\.ckpt'"):
        evaluate(cfg)


def test_run_stamp_under_torchrun_is_the_launchers_start_not_now(monkeypatch):
    import time

    from lightning_cls.cli.resolvers import _torchrun_agent_start, run_stamp

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    started = _torchrun_agent_start()  # this process's parent stands in for the agent
    assert started is not None and started <= time.time()
    first = run_stamp("%Y-%m-%d/%H-%M-%S.%f")
    time.sleep(1.1)  # a rank that resolves a second later still gets the same folder
    assert run_stamp("%Y-%m-%d/%H-%M-%S.%f") == first
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    assert run_stamp("%Y-%m-%d/%H-%M-%S.%f") != first  # otherwise: now


def test_pretrained_weights_preprocessing_becomes_the_data_default(tmp_path):
    from lightning_cls.train import apply_pretrained_preprocessing

    base = ["data=imagefolder", "data.root=/photos", "model=torchvision", "model.name=resnet18"]
    cfg = compose(overrides=[*base, "model.weights=DEFAULT"], tmp=tmp_path)
    assert apply_pretrained_preprocessing(cfg) == {
        "mean": [0.485, 0.456, 0.406],
        "std": [0.229, 0.224, 0.225],
        "decode_size": 256,
    }
    assert list(cfg.data.mean) == [0.485, 0.456, 0.406] and cfg.data.decode_size == 256
    # An explicit value wins; random weights change nothing.
    cfg = compose(overrides=[*base, "model.weights=DEFAULT", "data.mean=[0.5,0.5,0.5]"])
    assert "mean" not in apply_pretrained_preprocessing(cfg) and list(cfg.data.mean) == [0.5] * 3
    cfg = compose(overrides=base)
    assert apply_pretrained_preprocessing(cfg) == {} and cfg.data.mean is None


def test_final_weights_export_with_classes_read_from_the_folders(tmp_path):
    """data=imagefolder (num_classes null: one class per folder) without a best checkpoint:
    the export callback rebuilds the final network from the module's hyperparameters (issue
    19: a TypeError before, as the rebuild lacked the class count)."""
    from lightning_cls.inference import load_artifact

    g = torch.Generator().manual_seed(0)
    for name in ("cat", "dog", "owl"):
        (tmp_path / "imgs" / "train" / name).mkdir(parents=True)
        for i in range(6):
            pixels = torch.randint(0, 256, (12, 12, 3), dtype=torch.uint8, generator=g)
            Image.fromarray(pixels.numpy()).save(tmp_path / "imgs" / "train" / name / f"{i}.png")
    cfg = compose(
        overrides=[
            "data=imagefolder",
            f"data.root={tmp_path / 'imgs'}",
            "data.image_size=12",
            "data.val_size=3",
            "data.test_size=3",
            "data.cache=false",
            "callbacks=none",
            "trainer.enable_checkpointing=false",
            "trainer.enable_progress_bar=false",
            "trainer.max_epochs=1",
            "export=onnx",
            "test=false",
        ],
        tmp=tmp_path,
    )
    train(cfg)
    model = load_artifact(tmp_path / "run" / "export" / "model.onnx")
    assert model.spec.classes == ("cat", "dog", "owl")
    assert model.spec.model_kwargs["num_classes"] == 3


def test_results_val_is_the_tested_checkpoints_not_the_last_epochs(tmp_path, caplog):
    """A run whose last epoch (val/acc 0.333) is worse than its best checkpoint (0.60): `val`
    and the "Final metrics" line are the best checkpoint's, the one tested; `val_last` the last
    epoch's (issue 56)."""
    from types import SimpleNamespace

    from lightning_cls.callbacks.best_metric import BestMetric
    from lightning_cls.callbacks.preemption import Preemption
    from lightning_cls.train import RunCallbacks, run_summary, write_results

    best = tmp_path / "epoch002.ckpt"
    saved_at_best = {"best": 0.6, "best_epoch": 2, "metrics": {"val/acc": 0.6, "val/loss": 0.9}}
    state = {"best_model_score": torch.tensor(0.6)}
    torch.save({"callbacks": {"ModelCheckpoint": state, "BestMetric": saved_at_best}}, best)
    checkpoint = SimpleNamespace(best_model_path=str(best), best_model_score=None,
                                 state_key="ModelCheckpoint")  # fmt: skip
    last = {"val/acc": torch.tensor(0.333), "val/loss": torch.tensor(1.5)}
    loop = SimpleNamespace(epoch_loop=SimpleNamespace(_batches_that_stepped=30))
    trainer = SimpleNamespace(checkpoint_callback=checkpoint, callback_metrics=last,
                              precision="32-true", current_epoch=4, fit_loop=loop)  # fmt: skip
    run = RunCallbacks([], Preemption(tmp_path, requeue_signals=(), stop_signals=()), BestMetric())
    cfg = compose(overrides=[f"paths.output_dir={tmp_path}/run"], tmp=tmp_path)
    fit = run.fit_record(cfg, trainer)
    assert fit["val"] == pytest.approx({"val/acc": 0.6, "val/loss": 0.9})
    assert fit["val_last"] == pytest.approx({"val/acc": 0.333, "val/loss": 1.5})
    assert fit["best_val_acc"] == pytest.approx(0.6) and fit["val_of"] == "best_ckpt"
    tested = {"test": {"test/acc": 0.6}, "per_class_test": {}}
    summary = run_summary(cfg, fit, tested, trainer, started=0.0)
    caplog.set_level("INFO", logger="lightning_cls.train")
    write_results(cfg, summary)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["val"]["val/acc"] == pytest.approx(0.6)
    assert results["val_last"]["val/acc"] == pytest.approx(0.333)
    final = next(r.getMessage() for r in caplog.records if r.msg.startswith("Final metrics"))
    assert final.startswith('Final metrics: {"val/acc": 0.6, "val/loss": 0.9, "test/acc": 0.6}')
    assert final.endswith(f" (validation and test of the best checkpoint, {best})")
    assert 'Last epoch\'s validation metrics: {"val/acc": 0.333' in caplog.text
