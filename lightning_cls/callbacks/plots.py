"""``TrainingPlots``: ``curves.png`` at the end of fit, ``confusion_matrix.png`` and a per-class
accuracy table and ``per_class_accuracy.png`` (bars) after testing, all in the run directory
(a multi-label run: mAP/F1 curves and ``per_label_scores.png``, average precision per label).

The epoch history is kept by the callback itself (so it does not depend on which logger is
configured) and travels in checkpoints, so a resumed run draws the whole curve. The confusion
matrix is the module's own ``test_confusion`` metric (a torchmetrics
``MulticlassConfusionMatrix`` fed by ``test_step`` with the logits it scores, flip TTA
included, and summed over DDP ranks by torchmetrics), so no second forward pass is needed.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytorch_lightning as pl
import torch

from lightning_cls.fileio import atomic_savefig

log = logging.getLogger(__name__)

# Panel -> metrics; a metric the run does not log (val/map of a multi-class run) is not drawn.
CURVES = {
    "loss": ("train/loss_epoch", "val/loss"),
    "accuracy": ("train/acc", "val/acc", "val/map", "val/f1_micro"),
}
# Logged by the module's own on_train_epoch_end, which Lightning calls after the callbacks'.
LATE = ("train/acc",)


def plot_curves(history: list[dict[str, float]], path: Path) -> None:
    """Loss and accuracy per epoch, train and val, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    epochs = [row["epoch"] for row in history]
    for ax, (title, keys) in zip(axes, CURVES.items()):
        for key in (k for k in keys if any(k in row for row in history)):
            values = [row.get(key, float("nan")) for row in history]
            ax.plot(epochs, values, marker="o", label=key.replace("_epoch", ""))
        multilabel = any("val/map" in row for row in history)
        ax.set(title="mAP and micro-F1" if multilabel and title == "accuracy" else title)
        ax.set(xlabel="epoch")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=100)
    plt.close(fig)


def plot_confusion(matrix: torch.Tensor, classes: list[str], path: Path) -> None:
    """Row-normalized confusion matrix (rows: true class, columns: predicted)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = len(classes)
    normalized = matrix.float() / matrix.sum(1, keepdim=True).clamp(min=1)  # (K, K)
    size = min(4 + 0.4 * k, 20)
    fig, ax = plt.subplots(figsize=(size, size))
    image = ax.imshow(normalized.numpy(), cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(k), classes, rotation=90 if k > 10 else 45, ha="right")
    ax.set_yticks(range(k), classes)
    ax.set(xlabel="predicted", ylabel="true", title="confusion matrix (test)")
    if k <= 20:
        for i in range(k):
            for j in range(k):
                ax.text(
                    j,
                    i,
                    int(matrix[i, j]),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if normalized[i, j] > 0.5 else "black",
                )
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=100)
    plt.close(fig)


def plot_per_class_accuracy(matrix: torch.Tensor, classes: list[str], path: Path) -> None:
    """Per-class test accuracy (recall) as horizontal bars, classes under 50% in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lightning_cls.inference.mosaic import draw_class_bars

    fig, ax = plt.subplots(figsize=(6, 1.5 + 0.3 * min(len(classes), 60)))
    total = matrix.diag().sum().item() / max(1, matrix.sum().item())
    draw_class_bars(ax, matrix, classes, f"per-class accuracy (test, overall {total:.1%})")
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=100)
    plt.close(fig)


def plot_per_label(per_label: dict[str, dict], path: Path) -> None:
    """Multi-label test scores: average precision per label (and its positive count)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lightning_cls.inference.mosaic import draw_bars

    names = list(per_label)
    ap = [per_label[n]["average_precision"] for n in names]
    ap = [float("nan") if v is None else v for v in ap]
    positives = torch.tensor([per_label[n]["positives"] for n in names])
    fig, ax = plt.subplots(figsize=(6, 1.5 + 0.3 * min(len(names), 60)))
    defined = [v for v in ap if v == v]
    mean = sum(defined) / len(defined) if defined else float("nan")
    title = f"average precision per label (test, mAP {mean:.3f})"
    draw_bars(ax, ap, positives, names, title, xlabel="average precision")
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=100)
    plt.close(fig)


def per_class_table(matrix: torch.Tensor, classes: list[str]) -> str:
    support = matrix.sum(1)
    accuracy = matrix.diag().float() / support.clamp(min=1)
    width = max(len(c) for c in classes + ["class"])
    lines = [f"{'class':<{width}}  accuracy  support"]
    for name, acc, n in zip(classes, accuracy.tolist(), support.tolist()):
        lines.append(f"{name:<{width}}  {acc:8.4f}  {int(n):7d}")
    return "\n".join(lines)


class TrainingPlots(pl.Callback):
    """``dirpath`` defaults to the trainer's ``default_root_dir`` (the run directory)."""

    def __init__(self, dirpath: str | None = None):
        self.dirpath = dirpath
        self.history: list[dict[str, float]] = []
        self.matrix: torch.Tensor | None = None

    def _dir(self, trainer: pl.Trainer) -> Path:
        path = Path(self.dirpath or trainer.default_root_dir)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module) -> None:
        metrics = self._curve_metrics(trainer)  # train/acc here would be last epoch's value
        self.history.append(
            {"epoch": trainer.current_epoch, **{k: v for k, v in metrics.items() if k not in LATE}}
        )

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module) -> None:
        self._complete_last_row(trainer)

    def _complete_last_row(self, trainer: pl.Trainer) -> None:
        # Callbacks' on_train_epoch_end runs before the module's, which logs train/acc; the
        # epoch's row is completed once those values exist (next epoch start or fit end).
        row = self.history[-1] if self.history else None
        if row is not None and not any(k in row for k in LATE):
            row.update({k: v for k, v in self._curve_metrics(trainer).items() if k in LATE})

    @staticmethod
    def _curve_metrics(trainer: pl.Trainer) -> dict[str, float]:
        keys = {k for keys in CURVES.values() for k in keys}
        return {
            k: float(trainer.callback_metrics[k]) for k in keys if k in trainer.callback_metrics
        }

    def on_fit_end(self, trainer: pl.Trainer, pl_module) -> None:
        self._complete_last_row(trainer)
        if self.history and trainer.is_global_zero:
            path = self._dir(trainer) / "curves.png"
            plot_curves(self.history, path)
            log.info("Saved %s", path)

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        self.per_label = None
        if getattr(pl_module, "multilabel", False):  # no confusion matrix: per-label scores
            self.matrix = None
            self.per_label = pl_module.per_class_results("test")  # every rank: it syncs
            return
        metric = getattr(pl_module, "test_confusion", None)
        if metric is None:
            log.info(
                "%s has no test_confusion metric: no confusion matrix.", type(pl_module).__name__
            )
            self.matrix = None
            return
        self.matrix = metric.compute().cpu()  # (K, K); every rank calls it: it syncs

    def on_test_end(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero:
            return
        if getattr(self, "per_label", None):
            path = self._dir(trainer) / "per_label_scores.png"
            plot_per_label(self.per_label, path)
            log.info("Saved %s", path)
        if self.matrix is None:
            return
        k = self.matrix.shape[0]
        classes = list(getattr(pl_module, "classes", None) or [str(i) for i in range(k)])
        path = self._dir(trainer) / "confusion_matrix.png"
        plot_confusion(self.matrix, classes, path)
        plot_per_class_accuracy(self.matrix, classes, path.with_name("per_class_accuracy.png"))
        log.info("Per-class test accuracy:\n%s", per_class_table(self.matrix, classes))
        log.info("Saved %s", path)

    def state_dict(self) -> dict:
        return {"history": self.history}

    def load_state_dict(self, state_dict: dict) -> None:
        self.history = list(state_dict.get("history", []))
