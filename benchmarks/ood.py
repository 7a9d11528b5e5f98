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
printed: ``experiment=cifar10_fast`` scaled to the subset, with ``calibrate=true`` and the
default rule ``reject=knn``). Then every score is computed on the same network: ``msp`` and
``energy`` from the calibrated logits, ``pnorm`` (MaxLogit-pNorm, p=2), ``knn`` and
``mahalanobis`` fitted on the train split's features exactly as calibration fits them
(``feature_rules.fit``). AUROC treats the known test images as positives; FPR95 is the share
of unknowns scored above the score that 95% of known test images reach. The default rule's
threshold is the one chosen on validation (keep 0.95): its share of known test images kept and
of each unknown set accepted are reported too. Nothing is chosen on the test images or on the
unknowns. The last output line is a JSON summary.

Beside the library's rules, six post-hoc scores of the literature are measured on the same
network (``LITERATURE``: max logit, GEN, ReAct, ViM, relative Mahalanobis, kNN on the
penultimate features alone; see ``Literature``), and every score is also reported on
``near_val``: 2 x ``--ood-images`` other JPEGs of the unknown classes (the ones just before the
``near`` files), the set to compare scores on, so that a score picked from this table is not
picked on the reported unknowns.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trust import QUIET, _cpu, digits_folder, generated_folder, noise_folder, run

KNOWN = ("airplane", "automobile", "bird", "cat", "deer", "dog")
UNKNOWN = ("frog", "horse", "ship", "truck")
SCORES = ("msp", "energy", "pnorm", "knn", "mahalanobis")
# Post-hoc scores from the literature, measured beside the library's rules (not shipped as rules):
# each is computed here from the logits and the raw penultimate features (``Literature``).
LITERATURE = ("maxlogit", "gen", "react", "vim", "rmds", "knn_penultimate")


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started, cpu = time.time(), _cpu()
    if args.quick:
        root = generated_folder(work / "known", classes=3, per_class=24)
        near = generated_folder(work / "near", classes=1, per_class=24) / "train" / "c0"
        near_val = generated_folder(work / "near_val", classes=2, per_class=12) / "train" / "c1"
        n_ood, common = 24, ["data.val_size=0.25", "data.test_size=0.25", "data.batch_size=16"]
        recipe = ["model=simplecnn", "reject_k=5"]
    else:
        root, near, near_val = cifar_known_unknown(
            Path(args.cifar), work, args.per_class, args.ood_images
        )
        n_ood, common = args.ood_images, ["data.val_size=0.2", "data.test_size=0.2"]
        recipe = args.model.split()
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
    report["wall_s"], report["cpu_s"] = round(time.time() - started, 1), round(_cpu() - cpu, 1)
    print(json.dumps(report))
    return report


def one_seed(args, work: Path, root: Path, recipe, common, sets, seed: int) -> dict:
    """Train once, then score every set with every rule on that network."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from lightning_cls import config_dir

    data = ["data=imagefolder", f"data.root={root}", *common, f"seed={seed}"]
    out = work / f"train_seed{seed}"
    if args.reuse and (out / "results.json").is_file():  # the same command's network, kept
        summary = json.loads((out / "results.json").read_text())
    else:
        summary = run("train", [*data, *recipe, f"trainer.max_epochs={args.epochs}",
                                "calibrate=true", f"reject={args.rule}", "reject_keep=0.95",
                                "prediction_mosaic=false", *QUIET], out)  # fmt: skip
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[*data, *recipe])
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    splits = datamodule.splits
    scores, rule = score_all(summary["best_ckpt"], splits, sets, args.rule)
    result: dict = {
        "seed": seed,
        "test_acc": round(float(summary["test"].get("test/acc", float("nan"))), 4),
        "temperature": summary["calibration"]["temperature"],
        "known_test": len(splits["test"]),
    }
    known = scores["test"]
    for name in sets:
        for score in (*SCORES, *LITERATURE):
            auroc, fpr95 = auroc_fpr95(known[score], scores[name][score])
            result[f"{name}_auroc_{score}"], result[f"{name}_fpr95_{score}"] = auroc, fpr95
        accepted = scores[name][rule["score"]] >= rule["threshold"]
        result[f"{name}_accepted_at_rule"] = round(float(accepted.mean()), 4)
    result["test_kept_at_rule"] = round(
        float((known[rule["score"]] >= rule["threshold"]).mean()), 4
    )
    result["rule"] = rule["score"]
    return result


def score_all(ckpt: str, splits, sets: dict, rule_name: str = "knn") -> tuple[dict, dict]:
    """{set: {score: (N,) array}} for the known test split and each unknown folder, and the
    rule ``rule_name`` (score, threshold) fitted by the library's ``calibrate`` on the
    validation split as a training run's ``calibrate=true`` fits it (the checkpoint's
    temperature kept). ``knn``/``mahalanobis`` are fitted on the train split's features as
    ``training/calibration.py`` fits them."""
    import torch

    from lightning_cls.inference import feature_rules, find_images, load_artifact
    from lightning_cls.inference.images import load_image_batch
    from lightning_cls.inference.reject_rules import REJECT_RULES
    from lightning_cls.training.calibration import calibrate

    predictor = load_artifact(ckpt)
    spec = predictor.spec
    k = (spec.reject or {}).get("k", REJECT_RULES.create("knn").k)  # the run's, else the default
    takes_k = hasattr(REJECT_RULES.create(rule_name), "k")
    chosen = calibrate(predictor.runtime.net, spec, splits["val"], temperature=False,
                       reject={"name": rule_name, **({"k": k} if takes_k else {})}, keep=0.95,
                       train=splits["train"])  # fmt: skip
    rule = chosen.spec_updates["reject"]
    outputs = Outputs(predictor)
    _, train_features, train_penultimate = outputs(splits["train"].images)
    labels = splits["train"].labels
    fitted = {
        name: {"score": name, **feature_rules.fit(name, train_features, labels, **options)}
        for name, options in (("knn", {"k": k}), ("mahalanobis", {}))
    }
    literature = Literature(outputs.head, train_penultimate, np.asarray(labels), k)

    def scored(images) -> dict:
        logits, features, penultimate = outputs(images)
        z = logits / torch.as_tensor(spec.temperature)
        return {
            "msp": spec.decision.confidence(logits, "msp").numpy(),
            "energy": spec.decision.confidence(logits, "energy").numpy(),
            "pnorm": (z.max(1).values / z.norm(dim=1)).numpy(),
            **{name: feature_rules.scores(rule, features.numpy()) for name, rule in fitted.items()},
            **literature.scores(z.numpy(), penultimate),
        }

    out = {"test": scored(splits["test"].images)}
    for name, folder in sets.items():
        files = find_images([folder])
        images, _, failed = load_image_batch(files, spec.image_size, spec.num_channels)
        if failed:
            raise ValueError(f"{len(failed)} unreadable images in {folder}: {failed[:3]}")
        out[name] = scored(torch.from_numpy(images))
    return out, rule


class Outputs:
    """``predictor``'s logits and features (as predict computes them) and the raw penultimate
    features, the input of the network's last linear layer (``head``), caught by a hook."""

    def __init__(self, predictor):
        import torch

        from lightning_cls.inference.network import _last_linear

        self.predictor, self.caught = predictor, []
        _, self.head = _last_linear(predictor.runtime.net)
        # one pass first: it builds the feature net, whose own check runs the head too
        predictor.image_features(torch.zeros((1, *predictor.spec.input_shape), dtype=torch.uint8))
        self.head.register_forward_pre_hook(lambda _, args: self.caught.append(args[0].detach()))

    def __call__(self, images):
        import torch

        self.caught.clear()
        logits, features = self.predictor.image_features(images)
        penultimate = torch.cat(self.caught).flatten(1).numpy()
        if len(penultimate) != len(logits):  # test-time augmentation: more passes than images
            raise ValueError("score without TTA (tta_flip=false tta_translate=0)")
        return logits, features, penultimate


class Literature:
    """Post-hoc OOD scores of the literature (higher = more familiar), fitted on the training
    split's raw penultimate features ``train`` (N, D) and ``labels``; ``head`` is the last
    linear layer (weight W (K, D), bias b):

    - ``maxlogit``: the largest logit (Hendrycks et al. 2022; Vaze et al. 2022's MLS);
    - ``gen``: minus the generalised entropy sum p^g (1 - p)^g, g = 0.1 (Liu et al. 2023);
    - ``react``: the energy of W clip(h, c) + b, c the training features' 90th percentile
      (Sun et al. 2021);
    - ``vim``: energy minus alpha times the norm of h - o outside the training features'
      principal subspace of half their dimension, o = -pinv(W) b, alpha = mean max logit / mean
      residual norm on train (Wang et al. 2022);
    - ``rmds``: minus (the smallest class Mahalanobis distance of the L2-normalised h, minus
      its distance to one Gaussian of all classes) (relative Mahalanobis, Ren et al. 2021);
    - ``knn_penultimate``: ``knn`` on the L2-normalised h alone (Sun et al. 2022 exactly).

    ``maxlogit``, ``gen``, ``rmds`` and ``knn`` are the library's registered rules
    (``REJECT_RULES``), looked up here; ``react`` and ``vim`` need the raw penultimate
    features and the head's weights, which no artifact carries, so they are computed here.
    """

    def __init__(self, head, train: np.ndarray, labels: np.ndarray, k: int):
        from lightning_cls.inference import feature_rules
        from lightning_cls.inference.reject_rules import REJECT_RULES

        self.gen = REJECT_RULES.create("gen", gamma=0.1)
        self.w = head.weight.detach().double().numpy()
        self.b = head.bias.detach().double().numpy() if head.bias is not None else 0 * self.w[:, 0]
        train = train.astype(np.float64)
        self.clip = np.quantile(train, 0.90)
        self.origin = -np.linalg.pinv(self.w) @ self.b
        centred = train - self.origin
        values, vectors = np.linalg.eigh(centred.T @ centred / len(train))
        self.residual = vectors[:, np.argsort(values)[::-1][train.shape[1] // 2 :]]
        max_logit = (train @ self.w.T + self.b).max(1)
        self.alpha = max_logit.mean() / np.linalg.norm(centred @ self.residual, axis=1).mean()
        # the library's rules, fitted on the penultimate features: one Gaussian per class, one
        # of all classes (RMDS's background) and a bank of every training image
        self.rules = {
            name: {"score": name, **feature_rules.fit(name, train, labels, **options)}
            for name, options in (("rmds", {}), ("knn", {"k": k, "bank": len(train)}))
        }

    def scores(self, z: np.ndarray, h: np.ndarray) -> dict[str, np.ndarray]:
        from scipy.special import logsumexp, softmax

        from lightning_cls.inference import feature_rules
        from lightning_cls.inference.reject_rules import REJECT_RULES

        library = {name: feature_rules.scores(rule, h) for name, rule in self.rules.items()}
        maxlogit = REJECT_RULES.create("maxlogit").score_logits
        h = h.astype(np.float64)
        logits = h @ self.w.T + self.b
        p = softmax(z.astype(np.float64), axis=1)
        residual = np.linalg.norm((h - self.origin) @ self.residual, axis=1)
        return {
            "maxlogit": maxlogit(logits),
            "gen": self.gen.score_probabilities(p, self.gen.gamma),
            "react": logsumexp(np.minimum(h, self.clip) @ self.w.T + self.b, axis=1),
            "vim": logsumexp(logits, axis=1) - self.alpha * residual,
            "rmds": library["rmds"],
            "knn_penultimate": library["knn"],
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
    parser.add_argument("--rule", default="knn", choices=("msp", "energy", "knn", "mahalanobis"),
                        help="the rule each run fits (reject=) and whose threshold is reported")  # fmt: skip
    parser.add_argument("--reuse", action="store_true",
                        help="score the networks an earlier run of the same command left in "
                        "--work (train_seed<N>/results.json) instead of training them again")  # fmt: skip
    parser.add_argument(
        "--model",
        default="experiment=cifar10_fast data.batch_size=256 optimizer.lr=0.375 "
        "tta_flip=false tta_translate=0",
        help="train overrides: the model and its recipe",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs, args.seeds = 2, args.seeds[:1]
    return args


if __name__ == "__main__":
    main()
