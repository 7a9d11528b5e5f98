"""Unknown images on real photos: near- and far-OOD AUROC and FPR95 of every rejection score.

    python benchmarks/ood.py --per-class 2500 --epochs 10 --seeds 0 1 --work $WORK/ood
    python benchmarks/ood.py --quick      # generated images, seconds (tests/benchmarks)

Known: 6 CIFAR-10 classes (airplane, automobile, bird, cat, deer, dog: the first six, fixed
before any measurement) of the JPEG train split, ``--per-class`` each; the DataModule carves
validation and test (20% each) from them by seed. Unknown:

- near-OOD: the other 4 classes (frog, horse, ship, truck), ``--ood-images`` JPEGs that no
  split uses;
- far-OOD: uniform RGB noise, scikit-learn's digits upscaled (bilinear) to 32x32 RGB, and
  generated shapes and stripes (a random disc, square or stripe pattern in random colours).

One training run per seed (``python -m lightning_cls.train`` in this process, its command line
printed: ``experiment=cifar10_fast`` scaled to the subset, with ``calibration=default`` and the
default rule ``reject=knn``). Then every score is computed on the same network, each by the
library's registered rule (``REJECT_RULES``) that computes it, fitted on the train split's
logits and features (``RejectRule.fit_outputs``, what calibration fits) and scored with the
checkpoint's temperature: ``msp``, ``energy``, ``pnorm`` (MaxLogit-pNorm, p=2), ``knn`` (the
run's options), ``mahalanobis`` and ``combined`` (its defaults: what ``reject=auto`` gives),
beside the twelve candidates its defaults were chosen from (``COMBINED``). AUROC treats the known test images as positives; FPR95 is the share
of unknowns scored above the score that 95% of known test images reach. The default rule's
threshold is the one chosen on validation (keep 0.95): its share of known test images kept and
of each unknown set accepted are reported too. Nothing is chosen on the test images or on the
unknowns. The last output line is a JSON summary.

Beside those, six post-hoc scores of the literature are measured on the same network
(``LITERATURE``: max logit, GEN, ReAct, ViM, relative Mahalanobis, kNN on the penultimate
features alone, each a registered rule too; see ``Scores``), and every score is also reported on
``near_val``: 2 x ``--ood-images`` other JPEGs of the unknown classes (the ones just before the
``near`` files), the set to compare scores on, so that a score picked from this table is not
picked on the reported unknowns.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image
from trust import QUIET, cpu_seconds, digits_folder, generated_folder, noise_folder, run  # sibling

from lightning_cls.cli.renamed import renamed

KNOWN = ("airplane", "automobile", "bird", "cat", "deer", "dog")
UNKNOWN = ("frog", "horse", "ship", "truck")


@dataclass(frozen=True)
class Score:
    """A reported score: the registered rule (``REJECT_RULES``) that computes it, with its
    options; ``penultimate``: on the penultimate part of the features alone (their first D
    columns, D the last linear layer's inputs), L2-normalised."""

    rule: str
    options: dict = field(default_factory=dict)
    penultimate: bool = False


SCORES = {
    "msp": Score("msp"),
    "energy": Score("energy"),
    "pnorm": Score("pnorm", {"p": 2}),
    "knn": Score("knn"),  # with the run's options (``Scores``)
    "mahalanobis": Score("mahalanobis"),
    "combined": Score("combined"),
}
# The combined rule's candidates (issue 53): the feature rule knn OR a logit score, compared on
# near_val (and far-OOD) to choose conf/reject/combined.yaml's defaults; "combined" itself is
# scored with those defaults (what reject=combined and reject=auto give).
COMBINED = {
    f"combined_{join}_{logit}_{round(keep * 100)}": Score(
        "combined", {"join": join, "logit": logit, "feature_keep": keep}
    )
    for join in ("gate", "min")
    for logit in ("maxlogit", "energy")
    for keep in (0.95, 0.98, 0.99)
}
# Post-hoc scores of the literature, registered rules too, measured beside the library's:
LITERATURE = {
    "maxlogit": Score("maxlogit"),
    "gen": Score("gen", {"gamma": 0.1}),
    "react": Score("react", {"percentile": 90}),
    "vim": Score("vim"),  # its subspace: the paper's dimension for the width
    "rmds": Score("rmds", penultimate=True),
    "knn_penultimate": Score("knn", penultimate=True),  # every training image in the bank
}


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started, cpu = time.time(), cpu_seconds()
    if args.quick:
        root = generated_folder(work / "known", classes=3, per_class=24)
        near = generated_folder(work / "near", classes=1, per_class=24) / "train" / "c0"
        near_val = generated_folder(work / "near_val", classes=2, per_class=12) / "train" / "c1"
        n_ood, common = 24, ["data.val_size=0.25", "data.test_size=0.25", "data.batch_size=16"]
        recipe = ["model=simplecnn", "reject.k=5"]  # the default rule's, for 36 train images
    else:
        root, near, near_val = cifar_known_unknown(
            Path(args.cifar), work, args.per_class, args.ood_images
        )
        n_ood, common = args.ood_images, ["data.val_size=0.2", "data.test_size=0.2"]
        recipe = renamed("train", args.model.split())  # older keys (tta_flip=) still work
    sets = {
        "near": near,
        "near_val": near_val,
        "noise": noise_folder(work / "ood_noise", n_ood),
        "digits": digits_folder(work / "ood_digits", n_ood),
        "shapes": shapes_folder(work / "ood_shapes", n_ood),
    }
    runs = [one_seed(args, work, root, recipe, common, sets, seed) for seed in args.seeds]
    report = {
        "known": {"root": str(root), "classes": len(list((root / "train").iterdir()))},
        "ood_per_set": n_ood,
        "model": " ".join(recipe),
        "epochs": args.epochs,
        "runs": runs,
        "mean": {
            key: round(float(np.mean([r[key] for r in runs])), 4)
            for key in runs[0]
            if isinstance(runs[0][key], float)
        },
    }
    report["wall_s"] = round(time.time() - started, 1)
    report["cpu_s"] = round(cpu_seconds() - cpu, 1)
    print(json.dumps(report))
    return report


def one_seed(args, work: Path, root: Path, recipe, common, sets, seed: int) -> dict:
    """Train once, then score every set with every rule on that network."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from lightning_cls import config_dir
    from lightning_cls.inference.trust import reject_from_config

    data = ["data=imagefolder", f"data.root={root}", *common, f"seed={seed}"]
    out = work / f"train_seed{seed}"
    if args.reuse and (out / "results.json").is_file():  # the same command's network, kept
        summary = json.loads((out / "results.json").read_text())
    else:
        summary = run("train", [*data, *recipe, f"trainer.max_epochs={args.epochs}",
                                "calibration=default", f"reject={args.rule}", "calibration.keep=0.95",
                                "prediction_mosaic=false", *QUIET], out)  # fmt: skip
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[*data, *recipe, f"reject={args.rule}"])
        # the knn score's options: the run's own (a recipe's reject.<option>=), else its defaults
        knn = compose(
            config_name="train", overrides=[*data, *recipe, f"reject={SCORES['knn'].rule}"]
        )
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    splits = datamodule.splits
    scores, rule = score_all(
        summary["best_ckpt"], splits, sets, reject_from_config(cfg), reject_from_config(knn)
    )
    result: dict = {
        "seed": seed,
        "test_acc": round(float(summary["test"].get("test/acc", float("nan"))), 4),
        "temperature": summary["calibration"]["temperature"],
        "known_test": len(splits["test"]),
    }
    known = scores["test"]
    for name in sets:
        for score in {**SCORES, **COMBINED, **LITERATURE}:
            auroc, fpr95 = auroc_fpr95(known[score], scores[name][score])
            result[f"{name}_auroc_{score}"], result[f"{name}_fpr95_{score}"] = auroc, fpr95
        accepted = scores[name][rule["score"]] >= rule["threshold"]
        result[f"{name}_accepted_at_rule"] = round(float(accepted.mean()), 4)
    result["test_kept_at_rule"] = round(
        float((known[rule["score"]] >= rule["threshold"]).mean()), 4
    )
    result["rule"] = rule["score"]
    return result


def score_all(ckpt: str, splits, sets: dict, reject: dict, knn: dict) -> tuple[dict, dict]:
    """{set: {score: (N,) array}} for the known test split and each unknown folder, and the
    rule ``reject`` (``{name, **options}``: score, threshold) fitted by the library's
    ``calibrate`` on the validation split as a training run's ``calibration=default`` fits it (the
    checkpoint's temperature kept). Every score is its registered rule's, fitted on the train
    split (``Scores``); ``knn``: the knn score's options."""
    import torch

    from lightning_cls.inference import find_images, load_artifact
    from lightning_cls.inference.images import load_image_batch
    from lightning_cls.inference.network import with_features
    from lightning_cls.training.calibration import calibrate

    predictor = load_artifact(ckpt)
    spec, net = predictor.spec, predictor.runtime.net
    chosen = calibrate(net, spec, splits["val"], temperature=False, reject=reject, keep=0.95,
                       train=splits["train"])  # fmt: skip
    rule = chosen.spec_updates["reject"]
    train_logits, train_features = predictor.image_features(splits["train"].images)
    options = {key: value for key, value in knn.items() if key != "name"}
    scores = Scores(spec.decision, with_features(net).head, train_logits, train_features,
                    splits["train"].labels, options)  # fmt: skip

    def scored(images) -> dict:
        return scores(*predictor.image_features(images))

    out = {"test": scored(splits["test"].images)}
    for name, folder in sets.items():
        files = find_images([folder])
        images, _, failed = load_image_batch(files, spec.image_size, spec.num_channels)
        if failed:
            raise ValueError(f"{len(failed)} unreadable images in {folder}: {failed[:3]}")
        out[name] = scored(torch.from_numpy(images))
    return out, rule


class Scores:
    """Every reported score (``SCORES`` and ``LITERATURE``, higher = more familiar), each by
    its registered rule (``REJECT_RULES``), fitted as calibration fits it on the training
    images' raw ``logits`` (N, K), ``features`` (N, >= D, what predict gives) and ``labels``,
    with ``head`` the network's last linear layer (weight (K, D), bias): what
    ``RejectRule.fit_outputs`` gives each rule. ``task`` (the checkpoint's, its temperature
    included) scores them. ``knn``: the knn score's options; ``knn_penultimate`` keeps every
    training image in its bank (Sun et al. 2022 exactly):

    - ``maxlogit``: the largest logit (Hendrycks et al. 2022; Vaze et al. 2022's MLS);
    - ``gen``: minus the generalised entropy sum p^g (1 - p)^g, g = 0.1 (Liu et al. 2023);
    - ``react``: the energy of W clip(h, c) + b, c the training features' 90th percentile
      (Sun et al. 2021);
    - ``vim``: energy minus alpha times the norm of h - o outside the training features'
      principal subspace, o = -pinv(W) b (Wang et al. 2022);
    - ``rmds``: minus (the smallest class Mahalanobis distance of the L2-normalised h, minus
      its distance to one Gaussian of all classes) (relative Mahalanobis, Ren et al. 2021);
    - ``knn_penultimate``: ``knn`` on the L2-normalised h alone.
    """

    def __init__(self, task, head, logits, features, labels, knn: dict):
        from lightning_cls.inference import arrays, feature_rules
        from lightning_cls.inference.reject_rules import REJECT_RULES

        self.task = task
        self.width = feature_rules.head_arrays(head)[0].shape[1]  # D
        logits, features = arrays.as_numpy(logits), arrays.as_numpy(features)
        labels = np.asarray(labels)
        self.fitted = {}
        for name, score in {**SCORES, **COMBINED, **LITERATURE}.items():
            options = dict(score.options)
            if score.rule == SCORES["knn"].rule:  # the run's options; the whole bank on h
                options = {**knn, **options}
                if score.penultimate:
                    options["bank"] = len(features)
            elif score.rule == SCORES["combined"].rule:  # its feature rule: the run's knn
                options = {"feature": {"name": SCORES["knn"].rule, **knn}, **options}
            rule = REJECT_RULES.create(score.rule, **options)
            state = rule.fit_outputs(
                self.part(score, features), labels, logits=logits, task=task, head=head
            )
            self.fitted[name] = (rule, score, {"score": score.rule, **state})

    def part(self, score: Score, features: np.ndarray) -> np.ndarray:
        return features[:, : self.width] if score.penultimate else features

    def __call__(self, logits, features) -> dict[str, np.ndarray]:
        from lightning_cls.inference import arrays

        logits, features = arrays.as_numpy(logits), arrays.as_numpy(features)
        return {
            name: np.asarray(rule.scores(self.task, logits, self.part(score, features), state))
            for name, (rule, score, state) in self.fitted.items()
        }


def auroc_fpr95(known: np.ndarray, unknown: np.ndarray) -> tuple[float, float]:
    """AUROC (known positive, ties count half) and the share of unknowns at or above the
    score that 95% of the known images reach."""
    from sklearn.metrics import roc_auc_score

    truth = np.r_[np.ones(len(known)), np.zeros(len(unknown))]
    auroc = roc_auc_score(truth, np.r_[known, unknown])
    threshold = np.quantile(known, 0.05)
    return round(float(auroc), 4), round(float((unknown >= threshold).mean()), 4)


def cifar_known_unknown(cifar: Path, work: Path, per_class: int, n_unknown: int) -> tuple:
    """``work/cifar6_<n>/train/<known class>/`` (links to the first ``per_class`` JPEGs of
    each known class), ``work/cifar_unknown/`` (``n_unknown`` JPEGs spread over the unknown
    classes, taken from the end of each class folder) and ``work/cifar_unknown_val/`` (twice as
    many, the JPEGs just before those: unknowns to compare scores on, never the reported ones)."""
    if not (cifar / "train").is_dir():
        raise FileNotFoundError(
            f"{cifar}/train not found; unpack the CIFAR-10 JPEGs there: mkdir -p {cifar} && "
            f"tar -xzf ../shared/data/cifar10-train-jpg.tar.gz -C {cifar}"
        )
    known = work / f"cifar6_{per_class}"
    for name in KNOWN:
        _link(sorted((cifar / "train" / name).glob("*.jpg"))[:per_class], known / "train" / name)
    each = -(-n_unknown // len(UNKNOWN))
    unknown, unknown_val = work / "cifar_unknown", work / "cifar_unknown_val"
    for name in UNKNOWN:
        images = sorted((cifar / "train" / name).glob("*.jpg"))
        _link(images[-each:], unknown, f"{name}_")
        _link(images[-3 * each : -each], unknown_val, f"{name}_")
    return known, unknown, unknown_val


def _link(images: list[Path], folder: Path, prefix: str = "") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for image in images:
        link = folder / f"{prefix}{image.name}"
        if not link.exists():
            link.symlink_to(image.resolve())


def shapes_folder(root: Path, n: int, size: int = 32) -> Path:
    """Generated pictures that are no photo: a disc, a square or stripes in random colours
    on a random plain background, 32x32 RGB."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2)
    yy, xx = np.mgrid[:size, :size]
    for i in range(n):
        back, fore = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
        kind = i % 3
        if kind == 0:  # disc
            cy, cx, r = *rng.integers(8, 24, 2), rng.integers(4, 12)
            mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
        elif kind == 1:  # square
            y0, x0, side = *rng.integers(2, 16, 2), rng.integers(6, 16)
            mask = (yy >= y0) & (yy < y0 + side) & (xx >= x0) & (xx < x0 + side)
        else:  # stripes at a random angle and period
            angle, period = rng.uniform(0, np.pi), rng.integers(3, 9)
            mask = (np.cos(angle) * xx + np.sin(angle) * yy) % period < period / 2
        pixels = np.where(mask[..., None], fore, back).astype(np.uint8)
        Image.fromarray(pixels).save(root / f"{i}.png")
    return root


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="generated images, seconds")
    parser.add_argument("--cifar", default=str(Path.home() / "cifar10"),
                        help="the unpacked JPEGs (holds train/<class>/)")  # fmt: skip
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "ood"))
    parser.add_argument("--per-class", type=int, default=2500)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--ood-images", type=int, default=1000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--rule", default=SCORES["knn"].rule,
                        help="the rule each run fits (reject=<a registered rule>) and whose "
                        "threshold is reported")  # fmt: skip
    parser.add_argument("--reuse", action="store_true",
                        help="score the networks an earlier run of the same command left in "
                        "--work (train_seed<N>/results.json) instead of training them again")  # fmt: skip
    parser.add_argument(
        "--model",
        default="experiment=cifar10_fast data.batch_size=256 optimizer.lr=0.375 tta=none",
        help="train overrides: the model and its recipe",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs, args.seeds = 2, args.seeds[:1]
    return args


if __name__ == "__main__":
    main()
