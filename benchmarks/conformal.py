"""Prediction sets on CIFAR-10 JPEGs: coverage and mean set size on a held-out test split at
alpha 0.1 and 0.05, RAPS and APS, for several seeds (each seed carves its own val/test split
and trains its own model).

    python benchmarks/conformal.py --root $CIFAR10/train --per-class 1000 --epochs 5 \
        --seeds 1 2 --resplits 300 --work $WORK/conformal
    python benchmarks/conformal.py --quick     # generated images, seconds (tests/benchmarks)

Scaled down for a shared 2-core CPU: the first ``--per-class`` JPEGs of each class folder
under ``--root`` (20% carved as the test split, 20% of the rest as validation), the tutorial
SimpleCNN (``--model``) for a few epochs. The commands are the library's own, run in this
process (their command lines are printed): ``train calibration=default
calibration.conformal=0.1`` (the default method, RAPS), then ``calibrate ckpt_path=<best>
calibration.conformal=<alpha> calibration.conformal_method=<m>`` for the other settings (the same validation images and temperature:
calibration is deterministic). One split's coverage is one draw: ``resplit`` then pools each
model's validation and test probabilities and re-splits them ``--resplits`` times at random
(as many calibration images as the validation split had), the mean coverage being what the
guarantee bounds. ``--reuse`` keeps a seed's trained run found under ``--work``. The last output
line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image
from trust import QUIET, cpu_seconds, run

SETTINGS = [(0.1, "raps"), (0.05, "raps"), (0.1, "aps"), (0.05, "aps")]


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started, cpu = time.time(), cpu_seconds()
    if args.quick:
        root = generated_folder(work / "known", classes=3, per_class=60)
        common = ["data.val_size=0.25", "data.test_size=0.25", "data.batch_size=16"]
    else:
        root = subset(Path(args.root), work, args.per_class)
        common = ["data.val_size=0.2", "data.test_size=0.2"]
    report: dict = {"root": str(root), "model": args.model, "epochs": args.epochs, "runs": []}
    for seed in args.seeds:
        data = ["data=imagefolder", f"data.root={root}", *common, f"seed={seed}"]
        out = work / f"seed{seed}"
        trained = out / "train" / "results.json"
        if args.reuse and trained.is_file():
            summary = json.loads(trained.read_text())
        else:
            summary = run("train", [*data, *args.model.split(), f"trainer.max_epochs={args.epochs}",
                                    "calibration=default", "calibration.conformal=0.1", "prediction_mosaic=false",
                                    *QUIET], out / "train")  # fmt: skip
        entry = {"seed": seed, "test_acc": summary["test"].get("test/acc")}
        entry["temperature"] = summary["calibration"]["temperature"]
        for alpha, method in SETTINGS:
            if (alpha, method) == (0.1, "raps"):
                calibration = summary["calibration"]
            else:
                options = [f"ckpt_path={summary['best_ckpt']}", f"calibration.conformal={alpha}",
                           f"calibration.conformal_method={method}"]  # fmt: skip
                result = run("calibrate", [*data, *options], out / f"{method}_{alpha}")
                calibration = result["calibration"]
            entry[f"{method}_{alpha}"] = {
                key: calibration.get(key)
                for key in ("val_coverage", "test_coverage", "test_mean_set_size")
            } | {"qhat": round(calibration["conformal"]["qhat"], 4)}
        entry["resplit"] = resplit(summary["best_ckpt"], data, args.resplits)
        report["runs"].append(entry)
    report["wall_s"], report["cpu_s"] = (
        round(time.time() - started, 1),
        round(cpu_seconds() - cpu, 1),
    )
    print(json.dumps(report))
    return report


def resplit(ckpt: str, data: list[str], splits: int) -> dict:
    """Mean and sd of the test coverage over ``splits`` random re-splits of the pooled val +
    test probabilities (after the checkpoint's temperature), per method and alpha."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from lightning_cls import config_dir
    from lightning_cls.inference import conformal as cp
    from lightning_cls.inference import load_torch_model
    from lightning_cls.inference.predictor import Predictor

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose(config_name="calibrate", overrides=[*data, f"ckpt_path={ckpt}"])
    net, spec = load_torch_model(ckpt)
    datamodule = instantiate(cfg.data)
    datamodule.mean, datamodule.std = spec.mean, spec.std
    datamodule.prepare_data()
    datamodule.setup("fit")
    predictor, probs, labels = Predictor(net.eval(), spec), [], []
    for name in ("val", "test"):
        split = datamodule.splits[name]
        probs.append(spec.decision.probabilities(predictor.image_logits(split.images)).numpy())
        labels.append(split.labels.numpy())
    n, probs, labels = len(labels[0]), np.concatenate(probs), np.concatenate(labels)
    rng, out = np.random.default_rng(0), {"splits": splits, "calibration_images": n}
    for alpha, method in SETTINGS:
        covers = []
        for i in range(splits):
            order = rng.permutation(len(labels))
            params = cp.fit(probs[order[:n]], labels[order[:n]], alpha, method, seed=i)
            covers.append(cp.covered(probs[order[n:]], labels[order[n:]], params).mean())
        out[f"{method}_{alpha}"] = {"mean": round(float(np.mean(covers)), 4),
                                    "sd": round(float(np.std(covers)), 4)}  # fmt: skip
    return out


def subset(root: Path, work: Path, per_class: int) -> Path:
    """The first ``per_class`` JPEGs of each class folder under ``root``, linked into
    ``work/cifar_<per_class>/train/<class>/``."""
    if not root.is_dir():
        raise FileNotFoundError(f"--root {root} is not a folder of class folders of JPEGs.")
    linked = work / f"cifar_{per_class}"
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        target = linked / "train" / folder.name
        target.mkdir(parents=True, exist_ok=True)
        for image in sorted(folder.glob("*.jpg"))[:per_class]:
            link = target / image.name
            if not link.exists():
                link.symlink_to(image.resolve())
    return linked


def generated_folder(root: Path, classes: int, per_class: int, size: int = 16) -> Path:
    """--quick: ``root/train/c<i>/``, each class a colour under heavy noise (not separable)."""
    rng = np.random.default_rng(0)
    for c in range(classes):
        (root / "train" / f"c{c}").mkdir(parents=True, exist_ok=True)
        colour = np.eye(3)[c % 3] * 60 + 100
        for i in range(per_class):
            pixels = rng.normal(colour, 60, (size, size, 3)).clip(0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / "train" / f"c{c}" / f"{i}.png")
    return root


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="generated images, seconds")
    parser.add_argument("--root", default=str(Path.home() / "cifar10" / "train"))
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "conformal"))
    parser.add_argument("--per-class", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--resplits", type=int, default=300)
    parser.add_argument("--reuse", action="store_true", help="keep a seed's trained run")
    parser.add_argument(
        "--model", default="model=simplecnn", help="train overrides: the model and its recipe"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs, args.seeds, args.resplits = 1, [0], 20
    return args


if __name__ == "__main__":
    main()
