"""``BackboneFinetuning``: train the new head alone for a few epochs, then the whole network with
a lower learning rate for the pretrained backbone.

Equivalent to Lightning's ``BackboneFinetuning`` without its requirements on the module (a
``backbone`` attribute, an optimizer built from trainable parameters only) and with BatchNorm
kept in eval mode while frozen (Lightning's only stops updating the running statistics; the
layers then normalize with the statistics of each small fine-tuning batch instead of the
pretrained ones).

How: at ``on_fit_start`` (after ``configure_optimizers``, before a resumed optimizer state is
loaded) every param group that holds both backbone and head parameters is split in two, the
backbone's with ``lr × backbone_lr_scale``; a scheduler's per-group state is extended to match.
While frozen, backbone parameters have ``requires_grad=False``: no gradient is computed for
them and the optimizer skips them. Under DDP, use ``strategy=ddp_find_unused_parameters_true``
(DDP registered every parameter before the freeze); ``setup`` says so before any step runs.
"""

from __future__ import annotations

import logging

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.strategies import DDPStrategy
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

log = logging.getLogger(__name__)

# Per-group learning-rate keys that torch optimizers and schedulers keep (OneCycleLR's too).
_LR_KEYS = ("lr", "initial_lr", "max_lr", "min_lr")


def head_module_name(net: nn.Module) -> str:
    """Name of the module holding the network's last parameter: its classifier head."""
    names = [name for name, _ in net.named_parameters()]
    if not names:
        raise ValueError(f"{type(net).__name__} has no parameters to fine-tune.")
    return names[-1].rsplit(".", 1)[0] if "." in names[-1] else ""


class BackboneFinetuning(Callback):
    """Freeze all but the head of ``pl_module.net`` until ``unfreeze_at_epoch``, then train all.

    Args:
        unfreeze_at_epoch: first epoch (0-based) in which the backbone trains; 0 never freezes.
        backbone_lr_scale: backbone learning rate as a fraction of the head's (1.0: same rate).
        head: name of the head module inside ``pl_module.net`` (default: the module holding
            the last parameter, e.g. ``fc`` of a ResNet, ``classifier.3`` of MobileNetV3).
        bn_eval_while_frozen: keep the backbone's BatchNorm layers in eval mode while frozen.
    """

    def __init__(
        self,
        unfreeze_at_epoch: int = 1,
        backbone_lr_scale: float = 0.1,
        head: str | None = None,
        bn_eval_while_frozen: bool = True,
    ):
        if unfreeze_at_epoch < 0:
            raise ValueError(f"unfreeze_at_epoch must be >= 0, got {unfreeze_at_epoch}.")
        if not 0.0 < backbone_lr_scale <= 1.0:
            raise ValueError(f"backbone_lr_scale must be in (0, 1], got {backbone_lr_scale}.")
        self.unfreeze_at_epoch, self.backbone_lr_scale = unfreeze_at_epoch, backbone_lr_scale
        self.head, self.bn_eval_while_frozen = head, bn_eval_while_frozen
        self.frozen = False
        self._backbone: list[nn.Parameter] = []
        self._bns: list[nn.Module] = []

    def _split(self, pl_module: pl.LightningModule) -> None:
        net = getattr(pl_module, "net", pl_module)
        head = self.head if self.head is not None else head_module_name(net)
        modules = dict(net.named_modules())
        if head not in modules or head == "":
            raise ValueError(
                f"No head module '{head}' in {type(net).__name__}; set head= to one of "
                f"{', '.join(n for n in list(modules)[-5:] if n)} (the classifier layer)."
            )
        head_ids = {id(p) for p in modules[head].parameters()}
        self._backbone = [p for p in net.parameters() if id(p) not in head_ids]
        self._bns = [
            m
            for name, m in net.named_modules()
            if isinstance(m, _BatchNorm) and not (name == head or name.startswith(head + "."))
        ]
        self.head = head

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # Runs before the strategy wraps the model: fail with the fix instead of DDP's
        # "Expected to have finished reduction in the prior iteration" at the second step.
        strategy = trainer.strategy
        if (
            stage == "fit"
            and self.unfreeze_at_epoch > 0
            and isinstance(strategy, DDPStrategy)
            and not getattr(strategy, "_ddp_kwargs", {}).get("find_unused_parameters")
        ):
            raise ValueError(
                "BackboneFinetuning freezes the backbone after DDP has registered every "
                "parameter, so the frozen ones get no gradient; under DDP train with "
                "trainer.strategy=ddp_find_unused_parameters_true (or "
                "callbacks.finetune.unfreeze_at_epoch=0)."
            )

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._split(pl_module)
        if self.backbone_lr_scale == 1.0:
            return
        backbone = {id(p) for p in self._backbone}
        for optimizer in trainer.optimizers:
            origin = _split_groups(optimizer, backbone, self.backbone_lr_scale)
            for config in trainer.lr_scheduler_configs:
                if config.scheduler.optimizer is optimizer:
                    _extend_scheduler(config.scheduler, origin)
        log.info(
            "Fine-tuning: head '%s' at the base LR, %d backbone tensors at %.3g x LR, frozen until "
            "epoch %d.",
            self.head,
            len(self._backbone),
            self.backbone_lr_scale,
            self.unfreeze_at_epoch,
        )

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        frozen = trainer.current_epoch < self.unfreeze_at_epoch
        if frozen != self.frozen or trainer.current_epoch == 0:
            for p in self._backbone:
                p.requires_grad_(not frozen)
            if self.frozen and not frozen:
                # Lightning restores each submodule's own mode after validation, so the layers
                # set to eval while frozen stay so until told otherwise.
                for m in self._bns:
                    m.train(pl_module.training)
                log.info("Epoch %d: unfroze the backbone.", trainer.current_epoch)
            self.frozen = frozen

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        # Set before every step (a flag per layer): model.train() anywhere, e.g. by a user's
        # hook or an older Lightning after validation, would otherwise re-enable them.
        if self.frozen and self.bn_eval_while_frozen:
            for m in self._bns:
                m.eval()

    def state_dict(self) -> dict:
        return {"frozen": self.frozen}

    def load_state_dict(self, state_dict: dict) -> None:
        self.frozen = bool(state_dict.get("frozen", False))


def _split_groups(optimizer, backbone: set[int], scale: float) -> list[int]:
    """Split each group holding backbone and other params; return each group's origin index."""
    origin = list(range(len(optimizer.param_groups)))
    for i, group in enumerate(list(optimizer.param_groups)):
        mine = [p for p in group["params"] if id(p) in backbone]
        rest = [p for p in group["params"] if id(p) not in backbone]
        if not mine:
            continue
        if not rest:  # a group of backbone parameters only: scale it in place
            for key in _LR_KEYS:
                if key in group:
                    group[key] *= scale
            continue
        group["params"] = rest
        new = {k: v for k, v in group.items() if k != "params"}
        for key in _LR_KEYS:
            if key in new:
                new[key] *= scale
        optimizer.add_param_group({"params": mine, **new})
        origin.append(i)
    return origin


def _extend_scheduler(scheduler, origin: list[int]) -> None:
    """Give a scheduler created before the split one entry per new group (LambdaLR & co.)."""
    groups = scheduler.optimizer.param_groups
    if hasattr(scheduler, "base_lrs"):
        scheduler.base_lrs = [g.get("initial_lr", g["lr"]) for g in groups]
    if hasattr(scheduler, "lr_lambdas"):
        scheduler.lr_lambdas = [scheduler.lr_lambdas[i] for i in origin]
    if hasattr(scheduler, "_last_lr"):  # what get_last_lr() returns until the next step
        scheduler._last_lr = [g["lr"] for g in groups]
