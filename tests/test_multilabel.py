"""task=multilabel end to end: index files, BCE, mAP, the threshold chosen on val and carried
by checkpoints and artifacts, sigmoid predictions in predict, export and the server."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import httpx
import pytest
import torch

from hydra_helpers import QUIET_TRAINER, compose
from lightning_cls.data.multilabel import MultiLabelDataModule, read_index, write_color_squares
from lightning_cls.inference import load_artifact, predict_files, write_predictions_csv
from lightning_cls.inference.scores import (
    THRESHOLD_GRID,
    average_precision_per_label,
    best_threshold,
    f1_at,
    mean_average_precision,
)
from lightning_cls.module import ClassificationModule
from lightning_cls.train import train

# The learnable task of write_color_squares: a square of each present colour on noise.
# Five epochs of SimpleCNN reach a test mAP above this (0.97-0.99 measured); chance is ~0.4.
STATED_TEST_MAP = 0.9
QUIET = [*QUIET_TRAINER, "~callbacks.plots", "logger=csv"]


@pytest.fixture(scope="module")
def squares(tmp_path_factory) -> Path:
    return write_color_squares(
        tmp_path_factory.mktemp("squares"), {"train": 320, "val": 80, "test": 80}
    )


@pytest.fixture(scope="module")
def run(squares, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("multilabel_run")
    overrides = [
        *QUIET,
        "task=multilabel",
        "data=multilabel",
        f"data.root={squares}",
        "trainer.max_epochs=5",
        "export=onnx",
    ]
    return train(compose(overrides=overrides, tmp=tmp))


def test_training_reaches_the_stated_map_and_reports_multilabel_metrics(run):
    test = run["test"]
    assert test["test/map"] > STATED_TEST_MAP, test
    assert run["optimized_metric"] == "val/map"
    assert set(test) >= {"test/map", "test/auroc", "test/f1_micro", "test/f1_macro", "test/loss"}
    assert "test/acc" not in test
    per_label = run["per_class_test"]
    assert set(per_label) == {"blue", "green", "red", "yellow"}
    assert all(0.5 < v["average_precision"] <= 1.0 for v in per_label.values()), per_label
    assert "map" in Path(run["best_ckpt"]).name  # the checkpoint name follows task.metric
    assert (Path(run["run_dir"]) / "predictions_val.png").stat().st_size > 10_000


def test_the_threshold_is_chosen_on_val_and_travels_with_the_best_checkpoint(run):
    ckpt = torch.load(run["best_ckpt"], map_location="cpu", weights_only=True)
    hparams = ckpt["hyper_parameters"]
    assert hparams["task"] == "multilabel"
    assert hparams["threshold"] in THRESHOLD_GRID
    # test ran on the best checkpoint with its own threshold (not the last epoch's)
    assert run["test"]["test/threshold"] == pytest.approx(hparams["threshold"])
    predictor = load_artifact(run["best_ckpt"])
    assert predictor.spec.multilabel and predictor.spec.threshold == hparams["threshold"]
    weights = load_artifact(Path(run["best_ckpt"]).with_name("model_weights.pt"))
    assert (weights.spec.task, weights.spec.threshold) == ("multilabel", hparams["threshold"])


def test_onnx_export_carries_the_task_and_threshold_and_matches_the_checkpoint(run, squares):
    onnx = load_artifact(Path(run["run_dir"]) / "export" / "model.onnx")
    ckpt = load_artifact(run["best_ckpt"])
    assert (onnx.spec.task, onnx.spec.threshold) == ("multilabel", ckpt.spec.threshold)
    data = MultiLabelDataModule(str(squares))
    data.setup()
    images = data.splits["test"].images[:16]
    p_onnx, p_ckpt = onnx.predict_images(images), ckpt.predict_images(images)
    torch.testing.assert_close(p_onnx, p_ckpt, atol=1e-4, rtol=1e-3)
    # independent sigmoids, not a softmax: rows do not sum to one
    logits = ckpt.logits(ckpt.spec.preprocess(images))
    torch.testing.assert_close(p_ckpt, logits.sigmoid(), atol=1e-5, rtol=1e-4)
    assert not torch.allclose(p_ckpt.sum(1), torch.ones(16), atol=1e-2)


def test_predict_lists_every_label_above_the_threshold(run, squares, tmp_path):
    predictor = load_artifact(Path(run["run_dir"]) / "export" / "model.onnx")
    files = sorted((squares / "images").glob("test_*.png"))[:12]
    rows, failures = predict_files(predictor, files, batch_size=5)
    assert not failures and len(rows) == 12
    t = predictor.spec.threshold
    for row in rows:
        probs = dict(zip(predictor.spec.classes, row["all_probs"]))
        assert set(row["labels"]) == {c for c, p in probs.items() if p >= t}
        assert row["probs"] == sorted(row["probs"], reverse=True)
    out = tmp_path / "predictions.csv"
    write_predictions_csv(out, rows, [(tmp_path / "bad.png", "not an image")], 5, predictor.spec)
    table = list(csv.DictReader(out.open()))
    assert list(table[0]) == [
        "file",
        "labels",
        *(f"prob_{c}" for c in predictor.spec.classes),
        "error",
    ]
    assert table[0]["labels"] == ";".join(rows[0]["labels"])
    assert table[-1]["error"] == "not an image"
    # the CSV is itself a multi-label index: what predict wrote, the DataModule reads
    index = read_index(out)  # the unreadable file's row is skipped
    assert [labels for _, labels, _ in index] == [r["labels"] for r in rows]
    # and half or more are exactly the true label sets (chance: ~1 in 16 per image)
    truth = {f: labels for f, labels, _ in read_index(squares / "test.csv")}
    right = sum(set(r["labels"]) == set(truth[f"images/{Path(r['file']).name}"]) for r in rows)
    assert right >= 6, right


def test_the_server_answers_the_labels_above_the_threshold(run, squares):
    from lightning_cls.serve.app import ServeApp
    from lightning_cls.serve.config import ServeConfig
    from lightning_cls.serve.metrics import ServeMetrics

    artifact = Path(run["run_dir"]) / "export" / "model.onnx"
    predictor = load_artifact(artifact)
    app = ServeApp(ServeConfig(artifact=str(artifact)), predictor, ServeMetrics(), {"name": "m"})
    files = sorted((squares / "images").glob("test_*.png"))[:6]
    expected, _ = predict_files(predictor, files)

    async def ask():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await asyncio.gather(
                *(
                    client.post(
                        "/predict", content=f.read_bytes(), headers={"content-type": "image/png"}
                    )
                    for f in files
                )
            )

    try:
        answers = asyncio.run(ask())
    finally:
        app.close()
    for answer, want in zip(answers, expected):
        assert answer.status_code == 200, answer.text
        (got,) = answer.json()["predictions"]
        assert got["labels"] == want["labels"]  # all above the threshold, not a top-5
        assert got["probs"] == pytest.approx(want["probs"], abs=1e-5)


def test_eval_on_val_writes_per_label_metrics(run, squares, tmp_path):
    from lightning_cls.eval import evaluate

    cfg = compose(
        "eval",
        [
            *QUIET_TRAINER[:4],
            "data=multilabel",
            f"data.root={squares}",
            f"ckpt_path={run['best_ckpt']}",
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
    import pytorch_lightning as pl

    module = ClassificationModule.load_from_checkpoint(trained.ckpt, map_location="cpu")
    trainer = pl.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    (metrics,) = trainer.validate(module, datamodule=trained.data)
    per_class = module.per_class_results("val")
    assert set(per_class) == set(trained.spec.classes)
    support = sum(v["support"] for v in per_class.values())
    assert support == len(trained.data.splits["val"])
    recalls = [v["recall"] * v["support"] for v in per_class.values()]
    assert sum(recalls) / support == pytest.approx(metrics["val/acc"], abs=1e-5)


# -- the scores --------------------------------------------------------------------------------
def test_map_leaves_out_a_label_without_positives_instead_of_scoring_it_zero():
    probs = torch.tensor([[0.9, 0.2, 0.1], [0.8, 0.7, 0.3], [0.1, 0.6, 0.2], [0.2, 0.1, 0.4]])
    targets = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 0]])
    ap = average_precision_per_label(probs, targets)
    assert ap[:2].tolist() == [1.0, 1.0] and ap[2].isnan()
    assert mean_average_precision(probs, targets) == 1.0  # torchmetrics' macro mean: 0.667
    targets[2, 0] = 1  # a positive ranked last of four: AP = (1 + 1 + 3/4) / 3
    assert average_precision_per_label(probs, targets)[0] == pytest.approx(11 / 12)


def test_f1_and_the_threshold_chosen_for_it():
    probs = torch.tensor([[0.9, 0.35], [0.3, 0.8], [0.32, 0.2], [0.7, 0.31]])
    targets = torch.tensor([[1, 1], [0, 1], [0, 0], [1, 0]])
    micro, macro, per_label = f1_at(probs, targets, 0.5)
    # label 0: tp 2; label 1: tp 1, fn 1 -> micro 2*3 / (2*3 + 0 + 1), label-1 F1 2/3
    assert micro == pytest.approx(6 / 7) and per_label.tolist() == pytest.approx([1.0, 2 / 3])
    assert macro == pytest.approx((1 + 2 / 3) / 2)
    # 0.35 catches label 1's positive at 0.35 and none of the negatives below it
    assert best_threshold(probs, targets) == 0.35
    assert f1_at(probs, targets, 0.35)[0] == 1.0


# -- index files and bad input -----------------------------------------------------------------
def _tiny(root: Path, rows: list[str], name: str = "train.csv") -> Path:
    write_color_squares(root, {"train": 4}, image_size=8)
    (root / name).write_text("\n".join(rows) + "\n")
    return root


def test_json_index_and_csv_index_read_the_same_labels(tmp_path):
    root = write_color_squares(tmp_path, {"train": 6}, image_size=8)
    rows = read_index(root / "train.csv")
    entries = [{"file": f, "labels": labels} for f, labels, _ in rows]
    (root / "copy.json").write_text(json.dumps(entries))
    assert [(f, labels) for f, labels, _ in read_index(root / "copy.json")] == [
        (f, labels) for f, labels, _ in rows
    ]
    as_map = {f: labels for f, labels, _ in rows}
    (root / "map.json").write_text(json.dumps(as_map))
    assert {f: labels for f, labels, _ in read_index(root / "map.json")} == as_map


@pytest.mark.parametrize(
    "rows, error, match",
    [
        (
            ["file,labels", "images/train_0000.png,red;;blue,x"],
            ValueError,
            r"train.csv:2 has 3 fields",
        ),
        (
            ["images/nope.png,red"],
            FileNotFoundError,
            r"train.csv:1: image images/nope.png not found",
        ),
        (["file,labels", "images/train_0000.png,"], ValueError, r"lists no labels at all"),
    ],
)
def test_bad_index_rows_are_named(tmp_path, rows, error, match):
    dm = MultiLabelDataModule(str(_tiny(tmp_path, rows)), cache=False)
    with pytest.raises(error, match=match):
        dm.setup()


def test_a_wrong_label_count_is_named(tmp_path):
    root = write_color_squares(tmp_path, {"train": 8}, image_size=8)
    dm = MultiLabelDataModule(str(root), num_classes=3, image_size=8, cache=False)
    with pytest.raises(ValueError, match=r"data.num_classes=3 but .*train.csv has 4 labels; set"):
        dm.setup()


def test_a_label_unknown_to_train_is_named_with_its_row(tmp_path):
    root = _tiny(tmp_path, ["images/train_0000.png,red", "images/train_0001.png,blue"])
    (root / "test.csv").write_text("images/train_0002.png,red;purple\n")
    dm = MultiLabelDataModule(str(root), cache=False, val_size=1)
    with pytest.raises(
        ValueError, match=r"test.csv:1: label\(s\) \['purple'\] of .* not in the labels"
    ):
        dm.setup()


def test_missing_index_says_what_to_write(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"has no train.csv or train.json; write one row"):
        _ = MultiLabelDataModule(str(tmp_path)).classes
    with pytest.raises(
        ValueError,
        match=r"data.folds=5 is not supported with data=multilabel.* set data.folds=null",
    ):
        MultiLabelDataModule(str(tmp_path), folds=5)


def test_task_and_data_must_agree(squares, tmp_path):
    multi = compose(overrides=[*QUIET, "data=multilabel", f"data.root={squares}"], tmp=tmp_path)
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
        ({"class_weights": [1, 2]}, r"with task=multilabel use loss.pos_weight"),
        ({"mixup_alpha": 0.2}, r"MixUp/CutMix .* with task=multilabel set them to 0"),
        ({"threshold": 1.5}, r"task.threshold=1.5 is not a probability"),
        ({"pos_weight": [1.0]}, r"loss.pos_weight has 1 values \[1.0\]; give 4 positive numbers"),
    ],
)
def test_multiclass_only_options_are_one_line_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ClassificationModule(
            model_name="mlp",
            model_kwargs={"num_classes": 4, "in_channels": 3, "image_size": 8},
            task="multilabel",
            classes=["a", "b", "c", "d"],
            **kwargs,
        )


def test_pos_weight_auto_comes_from_the_train_counts_and_is_saved(squares, tmp_path):
    from lightning_cls.training.multilabel import resolve_pos_weight

    labels = torch.tensor([[1, 0], [1, 0], [0, 0], [1, 1]], dtype=torch.float32)
    assert resolve_pos_weight("auto", labels, 2) == pytest.approx([1 / 3, 3.0], abs=1e-6)
    with pytest.raises(ValueError, match=r"loss.pos_weight='often' is not known"):
        resolve_pos_weight("often", labels, 2)
    overrides = [
        *QUIET,
        "task=multilabel",
        "data=multilabel",
        f"data.root={squares}",
        "loss.pos_weight=auto",
        "trainer.max_epochs=1",
        "+trainer.limit_train_batches=2",
        "test=false",
        "prediction_mosaic=false",
    ]
    summary = train(compose(overrides=overrides, tmp=tmp_path))
    saved = torch.load(summary["best_ckpt"], weights_only=True)["hyper_parameters"]["pos_weight"]
    data = MultiLabelDataModule(str(squares))
    data.setup()
    expected = resolve_pos_weight("auto", data.splits["train"].labels, 4)
    assert saved == pytest.approx(expected) and all(w > 1 for w in saved)  # 40% positives


def test_end_to_end_onnx_ends_in_a_sigmoid(run, tmp_path):
    from lightning_cls.export.onnx_e2e import export_onnx_e2e
    from lightning_cls.inference import load_torch_model

    net, spec = load_torch_model(run["best_ckpt"])
    # the export checks the file against Predictor (sigmoid) at several batch sizes
    path = export_onnx_e2e(net, spec, tmp_path / "e2e.onnx")
    with pytest.raises(ValueError, match="end-to-end"):  # raw pixels in: not a Predictor input
        load_artifact(path)


def test_streaming_chunks_keep_multi_hot_labels(squares, tmp_path):
    pytest.importorskip("litdata")
    from lightning_cls.data.streaming import StreamingDataModule, write_streaming

    data = MultiLabelDataModule(str(squares))
    data.setup()
    splits = {k: (v.images[:40], v.labels[:40]) for k, v in data.splits.items()}
    out = write_streaming(
        splits, {**data.spec, "task": "multilabel"}, tmp_path / "chunks", progress=False
    )
    streamed = StreamingDataModule(str(out), batch_size=8)
    assert streamed.task == "multilabel"
    torch.testing.assert_close(streamed.splits["test"].labels, splits["test"][1])
    _, y = next(iter(streamed.test_dataloader()))
    assert y.shape == (8, 4) and y.dtype == torch.float32
    streamed.teardown()


def test_int8_export_gates_a_multilabel_model_on_val_map(run, squares, tmp_path):
    from lightning_cls.export.__main__ import export

    cfg = compose(
        "export",
        [f"ckpt_path={run['best_ckpt']}", "export=int8", "data=multilabel", f"data.root={squares}"],
        tmp=tmp_path,
    )
    result = export(cfg)
    report = next(r for r in result.reports if r.method == "onnx_static_int8")
    assert report.metric == "mAP" and report.accepted
    assert report.acc_before == pytest.approx(run["best_val_acc"], abs=1e-4)  # the best val mAP
    int8 = load_artifact(result.paths["onnx_int8"])
    assert (int8.spec.task, int8.spec.threshold) == (
        "multilabel",
        load_artifact(run["best_ckpt"]).spec.threshold,
    )


def test_per_label_plot_and_curves_draw_the_multilabel_metrics(run, tmp_path):
    from lightning_cls.callbacks.plots import plot_curves, plot_per_label

    plot_per_label(run["per_class_test"], tmp_path / "per_label_scores.png")
    history = [{"epoch": 0, "val/map": 0.8, "val/f1_micro": 0.6, "val/loss": 0.5}]
    plot_curves(history, tmp_path / "curves.png")
    assert (tmp_path / "per_label_scores.png").stat().st_size > 5_000
    assert (tmp_path / "curves.png").stat().st_size > 5_000


def test_a_fixed_threshold_is_kept_over_the_checkpoints_and_auto_takes_the_checkpoints():
    options = dict(
        model_name="mlp",
        model_kwargs={"num_classes": 2, "in_channels": 1, "image_size": 4},
        task="multilabel",
        classes=["a", "b"],
    )
    saved = {"hyper_parameters": {"threshold": 0.45}}
    fixed = ClassificationModule(threshold=0.3, **options)
    fixed.on_load_checkpoint(saved)
    auto = ClassificationModule(**options)
    auto.on_load_checkpoint(saved)
    assert (fixed.hparams.threshold, auto.hparams.threshold) == (0.3, 0.45)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"task": "multilabel", "pos_weight": "Auto"}, r"loss.pos_weight='Auto' is not known"),
        ({"threshold": 0.3}, r"task.threshold apply to multi-label models; set task=multilabel"),
        ({"pos_weight": [1.0, 2.0]}, r"loss.pos_weight and task.threshold apply to multi-label"),
        ({"task": "multi"}, r"task='multi' is not known; use task=multiclass or task=multilabel"),
    ],
)
def test_misspelt_or_misplaced_multilabel_options_are_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ClassificationModule(
            model_name="mlp",
            model_kwargs={"num_classes": 2, "in_channels": 1, "image_size": 4},
            classes=["a", "b"],
            **kwargs,
        )


def test_an_excel_csv_with_a_byte_order_mark_reads_like_any_other(tmp_path):
    root = write_color_squares(tmp_path, {"train": 5}, image_size=8)
    plain = read_index(root / "train.csv")
    (root / "train.csv").write_bytes(b"\xef\xbb\xbf" + (root / "train.csv").read_bytes())
    assert [(f, labels) for f, labels, _ in read_index(root / "train.csv")] == [
        (f, labels) for f, labels, _ in plain
    ]


@pytest.mark.parametrize(
    "text, match",
    [
        ("[1, 2", r"is not valid JSON"),
        ('"a.png"', r"holds a str; write a list of"),
        ('[{"labels": ["red"]}]', r"\[0\] is .*each entry needs \"file\""),
        ('[{"file": "a.png", "labels": [1]}]', r"\[0\]: \"labels\" must be a list of label names"),
    ],
)
def test_bad_json_indexes_are_named(tmp_path, text, match):
    (tmp_path / "train.json").write_text(text)
    with pytest.raises(ValueError, match=match):
        read_index(tmp_path / "train.json")


def test_two_indexes_for_one_split_are_refused(tmp_path):
    root = write_color_squares(tmp_path, {"train": 3}, image_size=8)
    (root / "train.json").write_text("{}")
    with pytest.raises(ValueError, match=r"has both train.csv and train.json; keep one"):
        _ = MultiLabelDataModule(str(root)).classes


def test_macro_f1_leaves_out_a_label_neither_true_nor_predicted():
    probs = torch.tensor([[0.9, 0.1], [0.2, 0.1]])
    targets = torch.tensor([[1, 0], [0, 0]])
    micro, macro, per_label = f1_at(probs, targets, 0.5)
    assert per_label[1].isnan() and macro == micro == 1.0


def test_a_rank_without_samples_joins_the_gather(tmp_path):
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:  # a free port for the process group
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # The target lives in a small module: a spawned child imports it, not this test file's
    # Lightning and Hydra imports.
    from multilabel_gather import gather_with_an_empty_rank

    mp.spawn(gather_with_an_empty_rank, args=(port, str(tmp_path)), nprocs=2)
    for rank in (0, 1):  # before: torchmetrics' empty placeholder aborted the gather (SIGABRT)
        shapes = torch.load(tmp_path / f"{rank}.pt", weights_only=False)
        assert shapes == (torch.Size([3, 4]), torch.Size([3, 4]), torch.uint8)


def test_scoring_a_multilabel_model_on_single_label_data_says_so(run):
    predictor = load_artifact(run["best_ckpt"])
    images = torch.zeros(4, 3, 32, 32, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"is a multilabel model but the labels have shape \(4,\)"):
        predictor.accuracy(images, torch.zeros(4, dtype=torch.int64))


def test_summarize_shows_the_metric_columns_the_jobs_have():
    from lightning_cls.summarize import _METRICS, table

    def row(job: int, **metrics) -> dict:
        values = dict.fromkeys(_METRICS)
        values.update({k.replace("_", "/"): v for k, v in metrics.items()})
        return {
            "job": job,
            "status": "COMPLETE",
            "params": {"seed": str(job)},
            "objective": 0.9,
            "wall_time_s": 1.0,
            "pruned_at_epoch": None,
            **values,
        }

    multilabel, _ = table([row(0, val_map=0.9, test_map=0.8), row(1, val_map=0.7)])
    multiclass, _ = table([row(0, val_acc=0.9, val_loss=0.3)])
    assert "val/map" in multilabel and "val/acc" not in multilabel
    assert "val/acc" in multiclass and "val/map" not in multiclass
