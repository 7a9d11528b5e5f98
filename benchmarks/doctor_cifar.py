"""The data check on real photos: ``python -m lightning_cls.doctor``'s checks on a CIFAR-10
JPEG subset with planted problems, timed.

    python benchmarks/doctor_cifar.py --root $CIFAR10 --per-class 1000 --test-per-class 100 \
        --plant 20 --flip 0.05

builds an ImageFolder of symlinks under a temp folder (nothing is written into ``--root``):
``train/`` with the first ``--per-class`` images of each class, ``test/`` with the next
``--test-per-class``; then plants ``--plant`` copies of test images in train (each re-encoded
as JPEG quality 60, some also brightened or resized: copies as they occur in scraped data) and
moves a ``--flip`` fraction of the train images to another class's folder. It runs
``diagnose`` and prints one JSON line: images, seconds (and per 1000 images, by stage),
planted duplicates found, duplicate groups beyond the planted ones (CIFAR-10 has its own),
label-error recall and precision against the flipped images, the probe's out-of-fold
accuracy, the CPU and the load average. ``--quick`` does the same on generated pictures
(seconds; tests/benchmarks/test_doctor_cifar.py).

The label check's probes compared (``doctor.probe``), on labels planted by the doctor itself
(``doctor.plant_noise``: a seeded share moved to other classes in memory, files unchanged):

    python benchmarks/doctor_cifar.py --root $CIFAR10 --per-class 400 --test-per-class 100 \
        --plant 0 --flip 0 --plant-noise 0.1 --probes kfold,pixels --epochs 6

runs the whole check with the first probe, then the label check alone with each other one;
``probes`` in the JSON holds each one's out-of-fold accuracy, findings, and precision and
recall against the planted labels, and the precision of the ranking's head that holds 70% of
them (``--model``, ``--epochs``, ``--batch-size``: what kfold trains per fold). With
``--experiment cifar10_fast`` each fold trains that recipe instead (its network, SGD-Nesterov
and schedule, callbacks, label smoothing and augmentation, composed as
``python -m lightning_cls.doctor experiment=cifar10_fast data=imagefolder`` does; ``--set``
adds overrides, e.g. ``data.batch_size=256 optimizer.lr=0.375`` for a few thousand images).
Each fold's held-out accuracy is logged as the fold ends.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from paired import cpu_name
from PIL import Image, ImageEnhance


def generated_root(folder: Path, classes: int = 3, count: int = 30) -> Path:
    """--quick: ``train/<class>/*.png`` of random smooth pictures (an 8x8 grid upscaled)."""
    rng = np.random.default_rng(0)
    for k in range(classes):
        (folder / "train" / f"c{k}").mkdir(parents=True)
        for i in range(count):
            grid = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
            Image.fromarray(grid).resize((32, 32), Image.BICUBIC).save(
                folder / "train" / f"c{k}" / f"{i:04d}.png"
            )
    return folder


def build_subset(
    root: Path, out: Path, per_class: int, test_per_class: int, classes=None, seed=None
) -> Path:
    """Symlinks: train/ from the first ``per_class`` files of each class (of ``classes``, or
    all), test/ the next; with ``seed``, from a seeded random order of each class's files."""
    known = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    for cls in classes or known:
        if cls not in known:
            raise ValueError(f"--classes: {cls!r} is not a class of {root}/train; known: {known}")
        files = sorted((root / "train" / cls).iterdir())
        if seed is not None:
            files = [files[i] for i in np.random.default_rng(seed).permutation(len(files))]
        for split, chosen in (
            ("train", files[:per_class]),
            ("test", files[per_class : per_class + test_per_class]),
        ):
            if not chosen:  # --test-per-class 0: a train/ folder alone, as users have
                continue
            (out / split / cls).mkdir(parents=True, exist_ok=True)
            for f in chosen:
                (out / split / cls / f.name).symlink_to(f.resolve())
    return out


def plant_copies(subset: Path, count: int, seed: int) -> list[tuple[str, str]]:
    """``count`` changed copies of test images, each put into train/ under its class."""
    rng = np.random.default_rng(seed)
    tests = sorted((subset / "test").glob("*/*"))
    pairs = []
    for n, i in enumerate(rng.choice(len(tests), count, replace=False)):
        src = tests[i]
        img = Image.open(src).convert("RGB")
        if n % 3 == 1:
            img = ImageEnhance.Brightness(img).enhance(1.1)
        elif n % 3 == 2:
            img = img.resize((img.width * 2, img.height * 2), Image.BILINEAR)
        buffer = io.BytesIO()
        img.save(buffer, "JPEG", quality=60)
        dst = subset / "train" / src.parent.name / f"planted_{n:03d}.jpg"
        dst.write_bytes(buffer.getvalue())
        pairs.append((str(src), str(dst)))
    return pairs


def flip_labels(subset: Path, fraction: float, seed: int) -> set[str]:
    """Move ``fraction`` of train's files to another (random) class folder."""
    rng = np.random.default_rng(seed)
    classes = sorted(p.name for p in (subset / "train").iterdir())
    files = sorted(f for f in (subset / "train").glob("*/*") if not f.name.startswith("planted"))
    moved = set()
    for i in rng.choice(len(files), int(round(fraction * len(files))), replace=False):
        src = files[i]
        others = [c for c in classes if c != src.parent.name]
        new = others[rng.integers(len(others))]  # the name keeps the class it came from:
        dst = subset / "train" / new / f"flipped_{src.parent.name}_{src.name}"  # no clash
        os.replace(src, dst)
        moved.add(str(dst))
    return moved


def measure(subset: Path, planted, flipped: set[str], args, probe: str) -> dict:
    """The whole check with ``probe`` (duplicates and files too when ``args.checks``)."""
    from lightning_cls.doctor import DoctorOptions, diagnose

    data, recipe = data_and_recipe(subset, args)
    load = os.getloadavg()[0]
    options = DoctorOptions(
        probe=probe,
        folds=args.folds,
        probe_epochs=args.epochs,
        plant_noise=args.plant_noise,
        features_from=args.features_from if probe == "embedding" else None,
        duplicates=args.checks,
    )
    result = diagnose(data, subset / f"report_{probe}", options, recipe)
    if not args.checks:  # a later probe: the label check alone
        return _label_numbers(result, data, flipped)
    grouped = [set(g["files"]) for g in result["duplicates"]]
    found = sum(any({a, b} <= g for g in grouped) for a, b in planted)
    planted_files = {f for pair in planted for f in pair}
    other = [g for g in grouped if not g & planted_files]
    images = sum(result["splits"].values())
    return {
        "images": images,
        "seconds": result["seconds"],
        "seconds_per_1000": round(1000 * result["seconds"] / images, 2),
        "stages": result["timings"],
        "planted_duplicates": len(planted),
        "planted_found": found,
        "other_duplicate_groups": len(other),
        "other_cross_split": sum(
            len({split for split, _ in g["members"]}) > 1
            for g in result["duplicates"]
            if not set(g["files"]) & planted_files
        ),
        **_label_numbers(result, data, flipped),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "load_start": round(load, 2),
        "load_end": round(os.getloadavg()[0], 2),
    }


def data_and_recipe(subset: Path, args):
    """The DataModule and what kfold trains per fold: ``--model`` with Adam at 1e-3 and
    ``--batch-size`` on the imagefolder defaults, or with ``--experiment`` the doctor's config
    composed as ``python -m lightning_cls.doctor experiment=<name> data=imagefolder`` (plus
    ``--set``) would: that recipe's network, optimizer, schedule, callbacks and augmentation."""
    from lightning_cls.data.imagefolder import ImageFolderDataModule
    from lightning_cls.doctor import TrainRecipe

    if not args.experiment:
        data = ImageFolderDataModule(
            str(subset), image_size=32, cache=False, decode_workers=2, batch_size=args.batch_size
        )
        model = {"num_classes": None, "in_channels": None, "image_size": None}
        return data, TrainRecipe(args.model, model, accelerator="cpu")
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from lightning_cls import config_dir
    from lightning_cls.doctor.__main__ import train_recipe

    overrides = [f"experiment={args.experiment}", "data=imagefolder", f"data.root={subset}",
                 "data.cache=false", "data.decode_workers=2", "trainer.accelerator=cpu",
                 *args.set]  # fmt: skip
    with initialize_config_dir(config_dir(), version_base="1.3"):
        cfg = compose("doctor", overrides=overrides)
    data = instantiate(cfg.data)
    data.name = cfg.data.name
    return data, train_recipe(cfg)


def _label_numbers(result: dict, data, flipped: set[str]) -> dict:
    """The label check against the moved files (``--flip``) and the planted labels
    (``--plant-noise``: the doctor's own ``plant_noise`` precision and recall)."""
    paths = data.split_files()
    issues = {paths[i["split"]][i["row"]] for i in result["label_issues"]}
    hits = len(issues & flipped)
    planted = result.get("planted") or {}
    moved = {(r["split"], r["row"]) for r in planted.get("rows", [])}
    ranked = [(i["split"], i["row"]) in moved for i in result["label_issues"]]  # most sure first
    return {
        "probe": result["label_probe"]["probe"],
        "label_seconds": result["timings"]["labels"],
        "flipped": len(flipped),
        "label_issues": len(issues),
        "label_recall": round(hits / max(1, len(flipped)), 3),
        "label_precision": round(hits / max(1, len(issues)), 3),
        "probe_accuracy": result["label_probe"]["out_of_fold_accuracy"],
        "self_test": result["label_probe"]["self_test"],
        "trusted": result["label_probe"]["reliable"],
        "chosen_from": result["label_probe"].get("chosen_from"),
        "planted_labels": planted.get("moved", 0),
        "planted_precision": planted.get("precision"),
        "planted_recall": planted.get("recall"),
        "planted_precision_at_recall_0.7": planted.get("precision_at_recall_0.7"),
        # the ranking: the share of moved labels among the first n findings
        "planted_precision_at": {
            n: round(sum(ranked[:n]) / n, 3) for n in (25, 100, 250, 500) if len(ranked) >= n
        },
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, help="CIFAR-10 JPEG root (holds train/<class>/)")
    parser.add_argument("--per-class", type=int, default=1000)
    parser.add_argument("--test-per-class", type=int, default=100)
    parser.add_argument("--classes", help="comma-separated class folders (default: all)")
    parser.add_argument("--seed", type=int,
                        help="draw each class's images and the moved files by this seed "
                        "(default: the first files, moves seeded 1)")  # fmt: skip
    parser.add_argument("--plant", type=int, default=20)
    parser.add_argument("--flip", type=float, default=0.05)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="generated pictures, seconds")
    parser.add_argument("--workdir", help="build the subset here and keep it (default: temp)")
    parser.add_argument("--prepare-only", action="store_true", help="build --workdir, stop")
    parser.add_argument("--features-from", help="the embedding probe's checkpoint")
    parser.add_argument("--probes", default="pixels",
                        help="doctor.probe of each run, comma-separated: "
                        "kfold,pixels,embedding,patches,knn,auto")  # fmt: skip
    parser.add_argument("--plant-noise", type=float, default=0.0, help="doctor.plant_noise")
    parser.add_argument("--model", default="simplecnn", help="kfold: the network (registry)")
    parser.add_argument("--epochs", type=int, default=10, help="kfold: doctor.probe_epochs")
    parser.add_argument("--batch-size", type=int, default=64, help="kfold: data.batch_size")
    parser.add_argument("--experiment", help="kfold: train this conf/experiment recipe per fold")
    parser.add_argument("--set", nargs="*", default=[], help="--experiment: more overrides")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(message)s")  # each fold's accuracy, as it ends
    logging.getLogger("lightning_cls.doctor").setLevel(logging.INFO)
    probes = args.probes.split(",")
    if args.features_from and "embedding" not in probes:
        probes = ["embedding"]  # the documented --features-from command
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.quick:
            args.root, args.per_class, args.test_per_class = generated_root(tmp / "src"), 24, 6
            args.plant, args.folds, args.epochs = 3, 3, 1
        subset = Path(args.workdir).expanduser() if args.workdir else tmp / "subset"
        manifest = subset / "manifest.json"
        if manifest.is_file():  # built by an earlier --workdir run (e.g. before training on it)
            known = json.loads(manifest.read_text())
            planted, flipped = [tuple(p) for p in known["planted"]], set(known["flipped"])
        elif args.root is None:
            parser.error("--root is required (or --quick, or a --workdir built before)")
        else:
            classes = args.classes.split(",") if args.classes else None
            build_subset(args.root.expanduser(), subset, args.per_class, args.test_per_class,
                         classes, args.seed)  # fmt: skip
            planted = plant_copies(subset, args.plant, seed=0)
            flip_seed = 1 if args.seed is None else args.seed + 1
            flipped = flip_labels(subset, args.flip, seed=flip_seed)
            record = {"planted": planted, "flipped": sorted(flipped)}
            manifest.write_text(json.dumps(record))
        out = {"quick": args.quick, **vars(args), "root": str(args.root)}
        if args.prepare_only:
            print(json.dumps(out | {"prepared": str(subset)}))
            return out
        started = time.perf_counter()
        args.checks = True
        out |= measure(subset, planted, flipped, args, probes[0])
        args.checks = False  # the other probes: the label check alone, on the same subset
        out["probes"] = {probes[0]: {k: out[k] for k in LABEL_KEYS}}
        for probe in probes[1:]:
            out["probes"][probe] = measure(subset, planted, flipped, args, probe)
        out["wall_seconds"] = round(time.perf_counter() - started, 2)
        if not args.workdir:
            for probe in probes:
                shutil.rmtree(subset / f"report_{probe}", ignore_errors=True)
    print(json.dumps(out))
    return out


LABEL_KEYS = ("probe", "label_seconds", "flipped", "label_issues", "label_recall",
              "label_precision", "probe_accuracy", "self_test", "trusted", "chosen_from", "planted_labels", "planted_precision",
              "planted_recall", "planted_precision_at_recall_0.7", "planted_precision_at")  # fmt: skip


if __name__ == "__main__":
    main()
