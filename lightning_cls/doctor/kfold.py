"""``doctor.probe=kfold``: the configured network finds the label errors itself.

For each fold of the project's stratified k-fold (``data/folds.fold_ids``) a fresh network is
trained, with the recipe the config composes (``model=``, ``optimizer=``, ``scheduler=``, the
data's own augmentation; or a whole ``experiment=``'s: its parameter groups, callbacks, label
smoothing and test-time augmentation too), on the other k-1 folds for ``doctor.probe_epochs``
epochs, and then predicts the fold it never saw (with the recipe's TTA, as evaluation does).
Each image's probabilities thus come from a network as strong as the one training will make,
which is what photos need: a linear probe on pixels is ~37% accurate out of fold on CIFAR-10
and its findings are mostly its own mistakes (docs/guides/data-check.md). It costs k short
trainings.

Deterministic by seed on a CPU: fold f's network is initialized after
``seed_everything(seed + f)`` and its batches are shuffled and augmented from the DataModule's
seeded draws (``data/tensor_loader.py``).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from lightning_cls.data.folds import fold_ids
from lightning_cls.inference.spec import Split
from lightning_cls.inference.tta import TTA

log = logging.getLogger(__name__)


@dataclass
class TrainRecipe:
    """What each fold trains: a registry model and its options, the optimizer and scheduler
    partials (``optimizer(params)``, ``scheduler(optimizer, total_steps=...)``; None: Adam at
    1e-3, no schedule), the parameter groups partial (``param_groups(net)``, as training's
    ``param_groups``), the callbacks (each fold trains with its own copy) and where it runs.
    ``python -m lightning_cls.doctor`` builds it from ``model=``, ``optimizer=``,
    ``scheduler=``, ``param_groups``, ``callbacks``, ``task.label_smoothing`` (an
    ``experiment=`` sets them all) and ``trainer.accelerator/precision``."""

    model_name: str = "simplecnn"
    # Input options left None are the data's (models.fill_input_options), as in model configs.
    model_kwargs: dict = field(
        default_factory=lambda: {"num_classes": None, "in_channels": None, "image_size": None}
    )
    optimizer: Callable | None = None
    scheduler: Callable | None = None
    param_groups: Callable | None = None
    callbacks: list = field(default_factory=list)  # templates: deep-copied for each fold
    channels_last: bool = False  # the weights too, as training converts them
    accelerator: str = "auto"
    precision: str = "32-true"
    # The task's options (``conf/task``'s keys): the probe is a multi-class model.
    task: dict = field(default_factory=lambda: {"name": "multiclass"})
    # The evaluation's test-time augmentation (a ``TTA`` or its dict; None: none): each fold's
    # network predicts its held-out images as the recipe evaluates (``experiment=cifar10_fast``:
    # flip + 1-px translate), a threshold left unset giving every image the full TTA.
    tta: TTA | dict | None = None


class KFoldProbe:
    """Out-of-fold probabilities of ``recipe``'s network trained on the other folds."""

    name = "kfold"

    def __init__(self, datamodule, recipe: TrainRecipe | None, epochs: int):
        self.datamodule, self.recipe, self.epochs = datamodule, recipe or TrainRecipe(), epochs

    def describe(self) -> str:
        return f"{self.recipe.model_name} trained {self.epochs} epochs per fold"

    def probabilities(self, images, labels, num_classes: int, folds: int, seed: int):
        x = images[0 : len(images)]  # (N, C, H, W) uint8, every split's rows
        y = torch.as_tensor(labels, dtype=torch.int64)
        ids = fold_ids(labels, folds, seed)
        probs = np.zeros((len(labels), num_classes), dtype=np.float64)
        for fold in range(folds):
            held = ids == fold
            train = Split(x[torch.from_numpy(~held)], y[torch.from_numpy(~held)])
            module = self._fit(train, seed + fold)
            probs[held] = self._predict(module, x[torch.from_numpy(held)])
            agree = float((probs[held].argmax(1) == np.asarray(labels)[held]).mean())
            log.info("kfold probe: fold %d/%d predicted (%d images, accuracy %.3f against their "
                     "labels).", fold + 1, folds, held.sum(), agree)  # fmt: skip
        return probs

    def _fit(self, train: Split, seed: int):
        import pytorch_lightning as pl

        from lightning_cls.module import ClassificationModule
        from lightning_cls.training.precision import resolve_precision

        # The user's DataModule with only its splits swapped: the same batch size, pipeline
        # and augmentation as training; the original (and its data) is left as it was.
        data = copy.copy(self.datamodule)
        data.splits = {"train": train, "val": train}  # val: never run (limit_val_batches=0)
        recipe = self.recipe
        pl.seed_everything(seed, workers=True, verbose=False)
        module = ClassificationModule(
            model_name=recipe.model_name,
            model_kwargs=dict(recipe.model_kwargs),
            optimizer=recipe.optimizer,
            scheduler=recipe.scheduler,
            param_groups=recipe.param_groups,
            task=dict(recipe.task),
            spec=data.spec,
        )
        if recipe.channels_last:
            module = module.to(memory_format=torch.channels_last)
        trainer = pl.Trainer(
            accelerator=recipe.accelerator,
            devices=1,
            precision=resolve_precision(recipe.precision, recipe.accelerator),
            max_epochs=self.epochs,
            limit_val_batches=0,  # nothing to choose: fixed epochs, the held fold stays unseen
            num_sanity_val_steps=0,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[copy.deepcopy(c) for c in recipe.callbacks],  # fresh state per fold
        )
        trainer.fit(module, datamodule=data)
        return module

    def _predict(self, module, images: torch.Tensor) -> np.ndarray:
        """(n, K) probabilities of ``images`` (uint8), preprocessed as evaluation does, with
        the recipe's test-time augmentation."""
        augment = self.datamodule.batch_augment()
        tta = TTA.from_value(self.recipe.tta).with_threshold(None)  # every image: full TTA
        module.eval()
        out = []
        with torch.inference_mode():
            for start in range(0, len(images), 512):
                x = augment(images[start : start + 512].to(module.device), train=False)
                out.append(module.decision.probabilities(tta.logits(module, x)).double().cpu())
        return torch.cat(out).numpy()
