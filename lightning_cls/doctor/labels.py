"""Likely label errors from out-of-fold predicted probabilities, and class counts.

The probabilities come from a linear probe (softmax regression) on simple features: each image
average-pooled to at most 16x16 pixels and standardized. It is fitted k times, once per fold of
the project's own stratified k-fold assignment (``data/folds.fold_ids``), and predicts only the
fold it did not see, so every image gets a probability from a model that never saw its label
(cleanlab's requirement: in-sample probabilities would have memorized the wrong labels).
A probe, not a trained CNN, because it answers in seconds on a CPU for tens of thousands of
images, is deterministic (full-batch L-BFGS from zeros) and needs no checkpoint; it separates
the classes of small or centred images (digits: ~91% out-of-fold) well enough for confident
mistakes to stand out, while on photos (CIFAR-10: ~40%) it finds only blatant ones
(docs/guides/data-check.md). The ranking is cleanlab's ``find_label_issues`` (confident
learning, Northcutt et al. 2021), ordered by self-confidence.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from lightning_cls.data.folds import fold_ids

MAX_SIDE = 16  # features: each image pooled to at most this many pixels a side


def probe_features(images: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) uint8 -> (N, D) float32 pooled pixels, standardized per feature."""
    parts = []
    for start in range(0, len(images), 4096):
        x = torch.as_tensor(images[start : start + 4096]).float() / 255  # (n, C, H, W)
        side = min(MAX_SIDE, x.shape[-1]), min(MAX_SIDE, x.shape[-2])
        parts.append(torch.flatten(F.adaptive_avg_pool2d(x, side[::-1]), 1))  # (n, D)
    return _standardized(torch.cat(parts))


def network_features(net: torch.nn.Module, spec, images: torch.Tensor, where: str) -> torch.Tensor:
    """(N, D) standardized embeddings: the input of ``net``'s last ``nn.Linear`` (its head)
    for each image, resized to the network's side and normalized as it was trained."""
    heads = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    if not heads:
        raise ValueError(f"{where} has no nn.Linear head to take embeddings from; use a "
                         "checkpoint of a network that ends in one, or doctor.features_from=null.")  # fmt: skip
    if images.shape[1] != spec.num_channels:
        raise ValueError(
            f"{where} takes {spec.num_channels}-channel images and the data has "
            f"{images.shape[1]}; use a checkpoint trained on images like these."
        )
    grabbed: list[torch.Tensor] = []
    hook = heads[-1].register_forward_pre_hook(lambda _, args: grabbed.append(args[0].flatten(1)))
    try:
        with torch.inference_mode():
            for start in range(0, len(images), 256):
                x = spec.preprocess(torch.as_tensor(images[start : start + 256]))  # (b, C, H, W)
                if x.shape[-1] != spec.image_size:
                    x = F.interpolate(x, size=spec.image_size, mode="bilinear", antialias=True)
                net(x)
    finally:
        hook.remove()
    return _standardized(torch.cat(grabbed).float())


def _standardized(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean(0)) / (x.std(0) + 1e-3)


def fit_probe(x: torch.Tensor, y: torch.Tensor, num_classes: int, weight_decay: float):
    """Softmax regression by full-batch L-BFGS; returns the fitted ``nn.Linear``."""
    linear = torch.nn.Linear(x.shape[1], num_classes)
    torch.nn.init.zeros_(linear.weight), torch.nn.init.zeros_(linear.bias)  # deterministic
    opt = torch.optim.LBFGS(
        linear.parameters(), lr=1, max_iter=100, history_size=10, line_search_fn="strong_wolfe"
    )

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(linear(x), y) + weight_decay * linear.weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return linear


def out_of_fold_probs(
    features: torch.Tensor,
    labels: np.ndarray,
    num_classes: int,
    folds: int,
    seed: int,
    weight_decay: float = 1e-2,
) -> np.ndarray:
    """(N, K) probabilities, each row from the probe fitted on the other folds."""
    x, y = features, torch.as_tensor(labels, dtype=torch.int64)
    ids = fold_ids(labels, folds, seed)
    probs = np.zeros((len(labels), num_classes), dtype=np.float64)
    for fold in range(folds):
        held = torch.from_numpy(ids == fold)
        with torch.enable_grad():
            probe = fit_probe(x[~held], y[~held], num_classes, weight_decay)
        with torch.no_grad():
            probs[held.numpy()] = torch.softmax(probe(x[held]), 1).double().numpy()
    return probs


def label_issues(labels: np.ndarray, probs: np.ndarray) -> list[dict]:
    """Rows cleanlab flags, most confident mistake first: row, given and suggested class
    index, and the probability the probe gave the given label."""
    from cleanlab.filter import find_label_issues  # the doctor extra

    present = np.unique(labels)
    if len(present) < 2:
        return []
    ranked = find_label_issues(labels, probs, return_indices_ranked_by="self_confidence", n_jobs=1)
    return [
        {
            "row": int(i),
            "given": int(labels[i]),
            "suggested": int(probs[i].argmax()),
            "given_prob": round(float(probs[i, labels[i]]), 4),
            "suggested_prob": round(float(probs[i].max()), 4),
        }
        for i in ranked
    ]


def class_balance(
    counts: dict[str, list[int]], classes: list[str], ratio: float, task: str
) -> dict:
    """Counts per split (multi-label: positives per label), the train split's max/min ratio
    and, from ``ratio`` on, the settings that make up for it with the weights they will use."""
    from lightning_cls.training.class_balance import class_weights

    train = counts["train"]
    most, least = max(train), min(train)
    imbalance = float("inf") if least == 0 else most / least
    out = {
        "counts": {split: dict(zip(classes, c)) for split, c in counts.items()},
        "imbalance": round(imbalance, 3) if least else None,
        "empty_classes": [name for name, n in zip(classes, train) if n == 0],
        "suggest": [],
    }
    if imbalance < ratio:
        return out
    if task == "multiclass":
        weights = class_weights(torch.as_tensor(train), "inverse")
        out["class_weights"] = dict(zip(classes, (round(w, 4) for w in weights)))
        out["suggest"] = ["loss.class_weights=auto", "data.balanced_sampler=true"]
    else:  # the multi-label loss weighs each label's positives instead
        out["suggest"] = ["loss.pos_weight=auto"]
    return out
