"""Multi-process training on CPU (gloo): exact distributed evaluation, torchrun's run dir and
the class-balanced sampler's shards."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import torch

from helpers.hydra_configs import QUIET_TRAINER, compose
from lightning_cls.data import DigitsDataModule
from lightning_cls.data.tensor_loader import balanced_order
from lightning_cls.train import train

QUIET = [*QUIET_TRAINER[2:], "~callbacks.plots", "~callbacks.model_weights", "logger=csv"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("ddp")
    summary = train(
        compose(overrides=["trainer=cpu", *QUIET, "trainer.max_epochs=2", "test=false"], tmp=tmp)
    )
    return summary["best_ckpt"]


@pytest.mark.slow
def test_two_process_test_metrics_equal_one_process(checkpoint, tmp_path):
    # digits' test split has 359 images: 180 + 179 over two ranks. With global batch 2 each
    # rank runs batches of one image, so the ranks even run different numbers of steps.
    common = [*QUIET, "train=false", f"ckpt_path={checkpoint}", "data.batch_size=2"]
    one = train(compose(overrides=[*common, "trainer=cpu"], tmp=tmp_path / "one"))
    two = train(compose(overrides=[*common, "trainer=ddp_sim"], tmp=tmp_path / "two"))
    acc = one["test"]["test/acc"]
    assert 0.2 < acc < 1.0  # not 0% or 100%: a padded duplicate would move it
    assert two["test"]["test/acc"] == acc  # to the last digit
    # The ranks' loss sums over their own counts (tests/test_module.py: a spawned rank counted
    # into shared states once, and a lost update made this the sum / 358): name the count.
    # rel=1e-5: the two ranks' float32 sums add in another order (gaps up to 5.8e-7 measured);
    # one image too few or too many moves the mean by 1/359, about 280x the tolerance.
    loss_one, loss_two = one["test"]["test/loss"], two["test"]["test/loss"]
    assert loss_two == pytest.approx(loss_one, rel=1e-5), f"sum / {359 * loss_one / loss_two:.2f}"
    # Per-class counts come back from the spawned processes (they were all zero before).
    assert sum(c["support"] for c in two["per_class_test"].values()) == 359
    assert two["per_class_test"] == one["per_class_test"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not on PATH")
def test_torchrun_ranks_share_one_run_directory(tmp_path):
    cmd = [
        "torchrun",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "lightning_cls.train",
        "trainer=ddp",
        "trainer.accelerator=cpu",
        "trainer.sync_batchnorm=false",
        "trainer.max_epochs=1",
        "+trainer.limit_train_batches=4",
        *QUIET,
        f"paths.root_dir={tmp_path}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [p for p in (tmp_path / "outputs" / "train").glob("*/*") if p.is_dir()]
    assert len(runs) == 1, runs  # one Hydra run dir for both ranks
    results = json.loads((runs[0] / "results.json").read_text())
    assert results["test"]["test/acc"] > 0.1
    assert (runs[0] / "checkpoints" / "digits_simplecnn" / "last.ckpt").is_file()


class ImbalancedDigits(DigitsDataModule):
    """Digits with every class but 0 cut to a sixth of its train images (class 0 then holds
    ~40% of them); each rank writes the train samples of each of its batches to
    ``record_dir/rank<r>.jsonl`` (the uint8 images before any transfer, matched to their
    index in the train split: the digits images are all distinct)."""

    def __init__(self, record_dir: str, **kwargs):
        super().__init__(**kwargs)
        self.record_dir = record_dir

    def load_splits(self):
        splits = super().load_splits()
        train = splits["train"]
        keep = (train.labels == 0) | (torch.arange(len(train.labels)) % 6 == 0)
        splits["train"] = train.subset(torch.nonzero(keep).squeeze(1))
        return splits

    def on_before_batch_transfer(self, batch, dataloader_idx: int):
        if self.trainer.training:
            x, y, (_, epoch, i, _) = batch
            train = self.splits["train"]
            where = {img.numpy().tobytes(): k for k, img in enumerate(train.images)}
            row = {"epoch": epoch, "batch": i, "idx": [where[img.numpy().tobytes()] for img in x]}
            row["labels"] = y.tolist()
            with open(f"{self.record_dir}/rank{self.trainer.global_rank}.jsonl", "a") as fh:
                fh.write(json.dumps(row) + "\n")
        return super().on_before_batch_transfer(batch, dataloader_idx)


@pytest.mark.slow
def test_two_ranks_draw_the_shards_of_one_class_balanced_order(tmp_path):
    overrides = [
        "trainer=ddp_sim",
        "trainer.strategy=ddp_fork",  # ddp_spawn's launcher, forked: test 1 runs ddp_spawn
        *QUIET,
        f"data._target_={__name__}.ImbalancedDigits",
        f"+data.record_dir={tmp_path}",
        "data.balanced_sampler=true",
        "data.batch_size=32",
        "trainer.max_epochs=2",
        "+trainer.limit_val_batches=1",
        "test=false",
    ]
    summary = train(compose(overrides=overrides, tmp=tmp_path))
    assert summary["best_ckpt"] and summary["val"]["val/acc"] > 0  # training finished
    # The best score of a spawned fit, read back from its checkpoint (it was None).
    assert summary["best_val_acc"] is not None
    assert summary["best_val_acc"] >= summary["val"]["val/acc"] - 1e-6  # the best, not the last
    dm = ImbalancedDigits(str(tmp_path), seed=42)  # the run's split (seed=42 in conf/train.yaml)
    dm.setup()
    labels = dm.splits["train"].labels  # (N,)
    n, counts = len(labels), torch.bincount(labels)
    assert counts[0] > 3 * counts[1:].max()  # imbalanced

    drawn = {}  # (rank, epoch) -> the indices it trained on, in order
    for rank in (0, 1):
        rows = [
            json.loads(line) for line in (tmp_path / f"rank{rank}.jsonl").read_text().splitlines()
        ]
        for epoch in (0, 1):
            batches = sorted(
                (r["batch"], r["idx"], r["labels"]) for r in rows if r["epoch"] == epoch
            )
            assert [b[0] for b in batches] == list(range(len(batches)))  # batches 0, 1, ... no gaps
            idx = torch.tensor([k for b in batches for k in b[1]])
            assert torch.equal(labels[idx], torch.tensor([c for b in batches for c in b[2]]))
            drawn[rank, epoch] = idx
    union = []
    for epoch in (0, 1):
        a, b = drawn[0, epoch], drawn[1, epoch]
        assert len(a) == len(b) == -(-n // 2)  # equal shards (padded), so equal step counts
        assert not torch.equal(a, b)  # not both ranks drawing the same samples
        # DistributedSampler's interleaved shards of one global order, which is a function of
        # (train labels, seed, epoch) alone: a rerun draws the same.
        assert torch.equal(torch.stack([a, b], 1).flatten()[:n], balanced_order(labels, epoch, 42))
        union.append(torch.cat([a, b]))
    assert not torch.equal(union[0], union[1])  # each epoch its own draw
    drawn_counts = torch.bincount(labels[torch.cat(union)], minlength=10).double()  # (10,)
    total = drawn_counts.sum()
    expected, sigma = total / 10, (total * 0.1 * 0.9) ** 0.5
    assert ((drawn_counts - expected).abs() < 4 * sigma).all(), drawn_counts  # ~10% each


@pytest.mark.slow
def test_multilabel_scores_gathered_over_two_processes_equal_one_process(tmp_path):
    # The epoch's sigmoid outputs are gathered from both ranks (torchmetrics "cat"): mAP,
    # F1 and the per-label counts must equal a one-process evaluation of the same checkpoint.
    from lightning_cls.data.multilabel import write_color_squares
    from lightning_cls.eval import evaluate

    root = write_color_squares(tmp_path / "squares", {"train": 64, "val": 31, "test": 33})
    data = ["data=multilabel", f"data.root={root}", "data.batch_size=8"]
    two = train(
        compose(
            overrides=[
                *QUIET,
                "task=multilabel",
                *data,
                "trainer=ddp_sim",
                "trainer.strategy=ddp_fork",
                "trainer.max_epochs=1",
                "prediction_mosaic=false",
            ],
            tmp=tmp_path / "two",
        )
    )
    one = evaluate(
        compose(
            "eval",
            [*QUIET_TRAINER[:4], *data, f"ckpt_path={two['best_ckpt']}", "prediction_mosaic=false"],
            tmp=tmp_path / "one",
        )
    )
    for key in ("test/map", "test/f1_micro", "test/threshold"):
        assert two["test"][key] == pytest.approx(one[key], abs=1e-6), key
    results = json.loads((tmp_path / "one" / "run" / "results.json").read_text())
    assert two["per_class_test"] == results["per_class_test"]
    assert sum(v["positives"] for v in two["per_class_test"].values()) > 0
