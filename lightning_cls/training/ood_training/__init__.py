"""Training for unknowns: an auxiliary loss that lifts near-OOD detection, chosen by
``ood_training=<name>`` (``conf/ood_training/``; ``none`` by default).

One ``OODTraining`` (an ``nn.Module``, ``base.py``) per method, in the ``OOD_TRAINING``
registry: ``rotation`` (``rotation.py``, Hendrycks et al. 2019) predicts how each training image
was rotated from the network's penultimate features; ``outliers`` (``outliers.py``, outlier
exposure, Hendrycks et al. 2019) trains the network towards uniform probabilities on
tile-shuffled training images. ``ClassificationModule(ood_training=
{"name": ..., **options})`` builds it with ``build_ood_training`` and adds its ``loss`` to the
training loss; it is a submodule, so its heads are saved in checkpoints (and rebuilt by
``load_from_checkpoint`` from the hyperparameters) but never exported: the exported network is
``module.net`` alone.
"""

from lightning_cls.training.ood_training.base import OOD_TRAINING, OODTraining, build_ood_training

__all__ = ["OOD_TRAINING", "OODTraining", "build_ood_training"]
