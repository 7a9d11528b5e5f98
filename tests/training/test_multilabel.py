"""task=multilabel training: BCE, mAP, the threshold chosen on val and carried by the best
checkpoint, per-label results, and the options that have no multi-label meaning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers import make_module, make_trainer
from helpers.gloo_ranks import run_ranks
from helpers.hydra_configs import QUIET_TRAINER, compose
from helpers.multilabel import QUIET, STATED_TEST_MAP
from lightning_cls.data.multilabel import MultiLabelDataModule
from lightning_cls.inference import load_artifact
from lightning_cls.inference.scores import THRESHOLD_GRID
from lightning_cls.module import ClassificationModule
from lightning_cls.train import train


def test_training_reaches_the_stated_map_and_reports_multilabel_metrics(multilabel_run):
    test = multilabel_run["test"]
    assert test["test/map"] > STATED_TEST_MAP, test
    assert multilabel_run["optimized_metric"] == "val/map"
    assert set(test) >= {"test/map", "test/auroc", "test/f1_micro", "test/f1_macro", "test/loss"}
    assert "test/acc" not in test
    per_label = multilabel_run["per_class_test"]
    assert set(per_label) == {"blue", "green", "red", "yellow"}
    assert all(0.5 < v["average_precision"] <= 1.0 for v in per_label.values()), per_label
    assert (
        "map" in Path(multilabel_run["best_ckpt"]).name
    )  # the checkpoint name follows task.metric
    assert (Path(multilabel_run["run_dir"]) / "predictions_val.png").stat().st_size > 10_000


def test_the_threshold_is_chosen_on_val_and_travels_with_the_best_checkpoint(multilabel_run):
    ckpt = torch.load(multilabel_run["best_ckpt"], map_location="cpu", weights_only=True)
    hparams = ckpt["hyper_parameters"]
    task = hparams["task"]  # the task's mapping: its options and what it chose
    assert task["name"] == "multilabel" and "threshold" not in hparams
    assert task["threshold"] in THRESHOLD_GRID
    hparams = task
    # test ran on the best checkpoint with its own threshold (not the last epoch's)
    assert multilabel_run["test"]["test/threshold"] == pytest.approx(hparams["threshold"])
    predictor = load_artifact(multilabel_run["best_ckpt"])
    assert (
        predictor.spec.decision.multi_hot
        and predictor.spec.decision.threshold == hparams["threshold"]
    )
    weights = load_artifact(Path(multilabel_run["best_ckpt"]).with_name("model_weights.pt"))
    assert (weights.spec.task["name"], weights.spec.decision.threshold) == (
        "multilabel",
        hparams["threshold"],
    )


def test_eval_on_val_writes_per_label_metrics(multilabel_run, multilabel_squares, tmp_path):
    from lightning_cls.eval import evaluate

    cfg = compose(
        "eval",
        [
            *QUIET_TRAINER[:4],
            "data=multilabel",
            f"data.root={multilabel_squares}",
            f"ckpt_path={multilabel_run['best_ckpt']}",
            "split=val",
            "prediction_mosaic=false",
        ],
        tmp=tmp_path,
    )
    metrics = evaluate(cfg)
    assert metrics["val/map"] > STATED_TEST_MAP
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert set(results["per_class_val"]) == {"blue", "green", "red", "yellow"}


def test_a_multiclass_validation_counts_per_class_metrics(trained):
    # eval split=val writes these (per_class_val); before, only test predictions were counted
    module = ClassificationModule.load_from_checkpoint(trained.ckpt, map_location="cpu")
    trainer = make_trainer()
    (metrics,) = trainer.validate(module, datamodule=trained.data)
    per_class = module.per_class_results("val")
    assert set(per_class) == set(trained.spec.classes)
    support = sum(v["support"] for v in per_class.values())
    assert support == len(trained.data.splits["val"])
    recalls = [v["recall"] * v["support"] for v in per_class.values()]
    assert sum(recalls) / support == pytest.approx(metrics["val/acc"], abs=1e-5)


def test_task_and_data_must_agree(multilabel_squares, tmp_path):
    multi = compose(
        overrides=[*QUIET, "data=multilabel", f"data.root={multilabel_squares}"], tmp=tmp_path
    )
    with pytest.raises(
        ValueError,
        match=r"task=multiclass but the data \(multilabel\) is multilabel.*set task=multilabel",
    ):
        train(multi)
    single = compose(overrides=[*QUIET, "task=multilabel"], tmp=tmp_path)
    with pytest.raises(
        ValueError,
        match=r"task=multilabel but the data \(digits\) is multiclass.*use data=multilabel",
    ):
        train(single)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"label_smoothing": 0.1}, r"label_smoothing=0.1 applies to multi-class"),
        ({"class_weights": [1, 2]}, r"with task=multilabel use task.pos_weight"),
        ({"mixup_alpha": 0.2}, r"MixUp/CutMix .* task=multilabel has neither"),
        ({"threshold": 1.5}, r"task.threshold=1.5 is not a probability"),
        ({"pos_weight": [1.0]}, r"task.pos_weight has 1 values \[1.0\]; give 4 positive numbers"),
    ],
)
def test_multiclass_only_options_are_one_line_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_module(module_kwargs={"task": {"name": "multilabel", **kwargs}})  # 4 classes


def test_pos_weight_auto_comes_from_the_train_counts_and_is_saved(multilabel_squares, tmp_path):
    from lightning_cls.training.tasks.multilabel import resolve_pos_weight

    labels = torch.tensor([[1, 0], [1, 0], [0, 0], [1, 1]], dtype=torch.float32)
    assert resolve_pos_weight("auto", labels, 2) == pytest.approx([1 / 3, 3.0], abs=1e-6)
    with pytest.raises(ValueError, match=r"task.pos_weight='often' is not known"):
        resolve_pos_weight("often", labels, 2)
    overrides = [
        *QUIET,
        "task=multilabel",
        "data=multilabel",
        f"data.root={multilabel_squares}",
        "task.pos_weight=auto",
        "trainer.max_epochs=1",
        "+trainer.limit_train_batches=2",
        "test=false",
        "prediction_mosaic=false",
    ]
    summary = train(compose(overrides=overrides, tmp=tmp_path))
    saved = torch.load(summary["best_ckpt"], weights_only=True)["hyper_parameters"]["task"][
        "pos_weight"
    ]
    data = MultiLabelDataModule(str(multilabel_squares))
    data.setup()
    expected = resolve_pos_weight("auto", data.splits["train"].labels, 4)
    assert saved == pytest.approx(expected) and all(w > 1 for w in saved)  # 40% positives


def test_per_label_plot_and_curves_draw_the_multilabel_metrics(multilabel_run, tmp_path):
    from lightning_cls.figures.plots import plot_curves, plot_per_label

    plot_per_label(multilabel_run["per_class_test"], tmp_path / "per_label_scores.png")
    history = [{"epoch": 0, "val/map": 0.8, "val/f1_micro": 0.6, "val/loss": 0.5}]
    plot_curves(history, tmp_path / "curves.png")
    assert (tmp_path / "per_label_scores.png").stat().st_size > 5_000
    assert (tmp_path / "curves.png").stat().st_size > 5_000


def test_a_fixed_threshold_is_kept_over_the_checkpoints_and_auto_takes_the_checkpoints():
    saved = {"hyper_parameters": {"task": {"name": "multilabel", "threshold": 0.45}}}
    fixed = make_module(module_kwargs={"task": {"name": "multilabel", "threshold": 0.3}})
    fixed.on_load_checkpoint(saved)
    auto = make_module(module_kwargs={"task": {"name": "multilabel", "threshold": "auto"}})
    auto.on_load_checkpoint(saved)
    assert (fixed.hparams.task["threshold"], auto.hparams.task["threshold"]) == (0.3, 0.45)
    auto.on_load_checkpoint({"hyper_parameters": {"task": "multilabel", "threshold": 0.4}})
    assert auto.decision.threshold == 0.4  # an older checkpoint's flat threshold


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"name": "multilabel", "pos_weight": "Auto"}, r"task.pos_weight='Auto' is not known"),
        ({"threshold": 0.3}, r"task.threshold apply to multi-label models; set task=multilabel"),
        ({"pos_weight": [1.0, 2.0]}, r"task.pos_weight and task.threshold apply to multi-label"),
        (
            {"name": "multi"},
            r"Unknown task .multi.\. Did you mean .multilabel.\? Known: multiclass, multilabel",
        ),
    ],
)
def test_misspelt_or_misplaced_multilabel_options_are_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_module(module_kwargs={"task": kwargs})


def test_a_rank_without_samples_joins_the_gather(tmp_path, fork_server, fork_env):
    # The ranks' body lives in a small module; they fork from the pre-imported fork server.
    gather = Path(__file__).parents[1] / "helpers" / "multilabel_gather.py"
    target = f"{gather}:gather_with_an_empty_rank"
    run_ranks(fork_server, fork_env, tmp_path, target, str(tmp_path))
    for rank in (0, 1):  # before: torchmetrics' empty placeholder aborted the gather (SIGABRT)
        shapes = torch.load(tmp_path / f"{rank}.pt", weights_only=False)
        assert shapes == (torch.Size([3, 4]), torch.Size([3, 4]), torch.uint8)
