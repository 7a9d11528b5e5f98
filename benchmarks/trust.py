"""Calibration and "unknown" on CIFAR-10 JPEGs: ECE before/after temperature scaling, and the
out-of-distribution AUROC (energy and MSP) against the digits upscaled to 32x32 and uniform noise.

    python benchmarks/trust.py --archive ../shared/data/cifar10-train-jpg.tar.gz \
        --per-class 500 --epochs 6 --work $WORK/trust
    python benchmarks/trust.py --model "experiment=cifar10_fast data.batch_size=128 \
        optimizer.lr=0.1875 tta=none" --per-class 1000 --epochs 4 \
        --work $WORK/trust_fast
    python benchmarks/trust.py --quick     # generated images, seconds (tests/benchmarks)

Scaled down for a shared 2-core CPU (docs/guides/calibration.md says so next to the numbers):
a per-class subset of the train split (val and test carved from it, 20% each), the
tutorial SimpleCNN (``model=simplecnn``, the default of ``--model``) or the overrides given in
``--model`` (e.g. the airbench recipe, which brings its own data.mean/std), a few epochs. The
commands are the library's own, run in this process (their command lines are printed):
``train calibration=default reject=energy``, then ``eval ood=<folder>`` per OOD set and score. The
last output line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import resource
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from lightning_cls.cli.renamed import renamed


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started, cpu = time.time(), cpu_seconds()
    if args.quick:
        root = generated_folder(work / "known", classes=3, per_class=16)
        n_ood, common = 12, ["data.val_size=0.25", "data.test_size=0.25", "data.batch_size=16"]
    else:
        root = cifar_subset(Path(args.archive), work, args.per_class)
        n_ood, common = args.ood_images, ["data.val_size=0.2", "data.test_size=0.2"]
    data = ["data=imagefolder", f"data.root={root}", *common, f"seed={args.seed}"]
    oods = {
        "digits": digits_folder(work / "ood_digits", n_ood),
        "noise": noise_folder(work / "ood_noise", n_ood),
    }
    train_dir = work / "train"
    summary = run("train", [*data, *args.model.split(), f"trainer.max_epochs={args.epochs}",
                            "calibration=default", "reject=energy", "calibration.keep=0.95",
                            "prediction_mosaic=false", *QUIET], train_dir)  # fmt: skip
    calibration = summary["calibration"]
    report = {
        "images": {"known_root": str(root), "ood_per_set": n_ood},
        "model": args.model,
        "test_acc": summary["test"].get("test/acc"),
        "temperature": calibration["temperature"],
        **{k: calibration[k] for k in sorted(calibration) if "_ece_" in k},
        "reject": calibration["reject"],
        "test_kept": calibration.get("test_kept"),
    }
    for name, folder in oods.items():
        for score in ("energy",) if args.quick else ("energy", "msp"):
            out = work / f"eval_{name}_{score}"
            run("eval", [*data, f"ckpt_path={summary['best_ckpt']}", f"ood={folder}",
                         f"ood_score={score}", "prediction_mosaic=false", *QUIET[:4]], out)  # fmt: skip
            ood = json.loads((out / "results.json").read_text())["ood"][folder.name]
            report[f"auroc_{name}_{score}"] = ood["auroc"]
            if ood["false_accept_rate"] is not None:
                report[f"false_accept_{name}"] = ood["false_accept_rate"]
    report["wall_s"], report["cpu_s"] = (
        round(time.time() - started, 1),
        round(cpu_seconds() - cpu, 1),
    )
    print(json.dumps(report))
    return report


QUIET = [
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "~callbacks.progress_bar",
    "~callbacks.model_summary",
    "~callbacks.learning_rate_monitor",
]


def run(command: str, overrides: list[str], out: Path) -> dict:
    """``python -m lightning_cls.<command> <overrides>``, in this process (printed first)."""
    from hydra import compose, initialize_config_dir

    from lightning_cls import config_dir

    overrides = [*overrides, f"paths.output_dir={out}", f"paths.root_dir={out.parent}"]
    overrides = renamed(command, overrides)  # older keys (tta_flip=...) as the command takes them
    print("python -m lightning_cls." + command, " ".join(overrides), flush=True)
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose(config_name=command, overrides=overrides)
    if command == "train":
        from lightning_cls.train import train

        return train(cfg)
    if command == "calibrate":
        from lightning_cls.calibrate import calibrate_checkpoint

        return calibrate_checkpoint(cfg)
    from lightning_cls.eval import evaluate

    return evaluate(cfg)


def cifar_subset(archive: Path, work: Path, per_class: int) -> Path:
    """The first ``per_class`` JPEGs of each class of the archive's ``train/`` (extracted once
    under ``work``), linked into ``work/cifar_<per_class>/<class>/``."""
    full = work / "cifar10"
    if not (full / "train").is_dir():
        with tarfile.open(archive) as tar:
            tar.extractall(full, filter="data")
    subset = work / f"cifar_{per_class}"
    for folder in sorted((full / "train").iterdir()):
        target = subset / "train" / folder.name
        target.mkdir(parents=True, exist_ok=True)
        for image in sorted(folder.glob("*.jpg"))[:per_class]:
            link = target / image.name
            if not link.exists():
                link.symlink_to(image.resolve())
    return subset


def generated_folder(root: Path, classes: int, per_class: int, size: int = 32) -> Path:
    """--quick: ``root/train/c<i>/``, each class a colour with noise."""
    rng = np.random.default_rng(0)
    for c in range(classes):
        (root / "train" / f"c{c}").mkdir(parents=True, exist_ok=True)
        colour = np.eye(3)[c % 3] * 200 + 30
        for i in range(per_class):
            pixels = rng.normal(colour, 40, (size, size, 3)).clip(0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / "train" / f"c{c}" / f"{i}.png")
    return root


def digits_folder(root: Path, n: int) -> Path:
    """scikit-learn's 8x8 digits upscaled (bilinear) to 32x32, as RGB PNGs."""
    from sklearn.datasets import load_digits

    root.mkdir(parents=True, exist_ok=True)
    images = np.round(load_digits().images[:n] * (255.0 / 16.0)).astype(np.uint8)
    for i, image in enumerate(images):
        big = Image.fromarray(image).resize((32, 32), Image.BILINEAR).convert("RGB")
        big.save(root / f"{i}.png")
    return root


def noise_folder(root: Path, n: int) -> Path:
    """Uniform RGB noise, 32x32."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(root / f"{i}.png")
    return root


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="generated images, seconds")
    parser.add_argument("--archive", default="../shared/data/cifar10-train-jpg.tar.gz")
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "trust"))
    parser.add_argument("--per-class", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--ood-images", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--model", default="model=simplecnn", help="train overrides: the model and its recipe"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs = 1
    return args


if __name__ == "__main__":
    main()
