"""Learning-rate schedules, all stepped once per optimizer step (Lightning ``interval: step``),
and parameter-group functions (per-group learning-rate / weight-decay scales).

Each takes the optimizer and ``total_steps`` (filled in by ``ClassificationModule`` from
``trainer.estimated_stepping_batches``), so configs can give them as ``_partial_: true``.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR, LRScheduler, OneCycleLR


def _with_warmup(shape, warmup_steps: int):
    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        return shape(step)

    return factor


def cosine(
    optimizer: Optimizer, total_steps: int, warmup_steps: int = 0, min_lr_ratio: float = 0.0
) -> LRScheduler:
    """Linear warm-up, then cosine decay to ``min_lr_ratio`` × the base learning rate."""

    def shape(step: int) -> float:
        span = max(1, total_steps - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / span)
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, _with_warmup(shape, warmup_steps))


def step(
    optimizer: Optimizer,
    total_steps: int,
    milestones: tuple[float, ...] = (0.5, 0.75),
    gamma: float = 0.1,
    warmup_steps: int = 0,
) -> LRScheduler:
    """Multiply the rate by ``gamma`` at each milestone, given as a fraction of training."""
    marks = [int(m * total_steps) for m in milestones]

    def shape(s: int) -> float:
        return gamma ** sum(s >= m for m in marks)

    return LambdaLR(optimizer, _with_warmup(shape, warmup_steps))


def one_cycle(
    optimizer: Optimizer, total_steps: int, max_lr: float | None = None, pct_start: float = 0.25
) -> LRScheduler:
    """Leslie Smith's one-cycle policy (``max_lr`` defaults to the optimizer's lr)."""
    peak = max_lr if max_lr is not None else [g["lr"] for g in optimizer.param_groups]
    return OneCycleLR(optimizer, max_lr=peak, total_steps=total_steps, pct_start=pct_start)


def triangle(
    optimizer: Optimizer,
    total_steps: int,
    start: float = 0.2,
    peak_at: float = 0.23,
    end: float = 0.07,
) -> LRScheduler:
    """airbench's schedule: linear from ``start`` × lr up to lr at ``peak_at`` of training,
    then linear down to ``end`` × lr at the last step."""
    if not 0.0 < peak_at < 1.0:
        raise ValueError(f"triangle peak_at must be a fraction in (0, 1), got peak_at={peak_at}.")
    up = max(1, int(total_steps * peak_at))
    down = max(1, total_steps - up)

    def factor(s: int) -> float:
        if s < up:
            return start + (1.0 - start) * s / up
        return 1.0 + (end - 1.0) * min(1.0, (s - up) / down)

    return LambdaLR(optimizer, factor)


# -- parameter groups -------------------------------------------------------------------------
# A param-groups function takes the network and returns torch param-group dicts; besides any
# optimizer key, a group may carry ``lr_scale`` and ``weight_decay_scale``, which
# ``apply_group_scales`` multiplies into the optimizer's lr / weight_decay after it is built
# (the optimizer config keeps one base lr). ``ClassificationModule(param_groups=...)`` calls it.


def norm_bias_groups(
    net: nn.Module, lr_scale: float = 64.0, decay_per_step: bool = True
) -> list[dict]:
    """airbench's groups: BatchNorm parameters get ``lr_scale`` × the learning rate; with
    ``decay_per_step`` their weight decay is divided by it, so the decay each step applies
    (lr × weight_decay) stays that of the other parameters."""
    if lr_scale <= 0:
        raise ValueError(f"norm_bias_groups lr_scale must be > 0, got lr_scale={lr_scale}.")
    norm_types = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)
    norm_params = {
        id(p) for m in net.modules() if isinstance(m, norm_types) for p in m.parameters(False)
    }
    norm = [p for p in net.parameters() if id(p) in norm_params]
    other = [p for p in net.parameters() if id(p) not in norm_params]
    groups = [{"params": other}]
    if norm:
        wd_scale = 1.0 / lr_scale if decay_per_step else 1.0
        groups.append({"params": norm, "lr_scale": lr_scale, "weight_decay_scale": wd_scale})
    return groups


def apply_group_scales(optimizer: Optimizer) -> Optimizer:
    """Multiply each group's ``lr``/``weight_decay`` by its ``lr_scale``/``weight_decay_scale``
    (once: the scale keys are then set to 1, so calling it again changes nothing)."""
    for group in optimizer.param_groups:
        for key in ("lr", "weight_decay"):
            scale = group.get(f"{key}_scale", 1.0)
            if key in group and scale != 1.0:
                group[key] = group[key] * scale
                group[f"{key}_scale"] = 1.0
    return optimizer


def muon_groups(
    net: nn.Module, head_lr_scale: float = 12.6, norm_lr_scale: float = 1.0
) -> list[dict]:
    """airbench94_muon's split for ``MuonHybrid``: every weight with two or more dimensions (the
    hidden layers' matrices and conv filters) to Muon (``"muon": True``), except the classifier
    head (the network's last ``nn.Linear``), which goes with the norms and biases to the
    auxiliary optimizer at ``head_lr_scale`` × its learning rate (airbench94_muon: head lr
    0.67 / bias lr 0.053); ``norm_lr_scale`` scales the norm and bias group. Weight decay is
    divided by each scale, so the decay a step applies stays the auxiliary group's (airbench's
    ``weight_decay=wd/lr``). A frozen weight (airbench's whitening stem) stays in its group and
    is skipped while it has no gradient."""
    for name, scale in (("head_lr_scale", head_lr_scale), ("norm_lr_scale", norm_lr_scale)):
        if scale <= 0:
            raise ValueError(f"muon_groups {name} must be > 0, got {name}={scale}.")
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    head = {id(p) for p in linears[-1].parameters()} if linears else set()
    hidden = [p for p in net.parameters() if p.ndim >= 2 and id(p) not in head]
    head_params = [p for p in net.parameters() if id(p) in head]
    rest = [p for p in net.parameters() if p.ndim < 2 and id(p) not in head]
    groups = [{"params": hidden, "muon": True}]
    for params, scale in ((rest, norm_lr_scale), (head_params, head_lr_scale)):
        if params:
            groups.append(
                {
                    "params": params,
                    "muon": False,
                    "lr_scale": scale,
                    "weight_decay_scale": 1 / scale,
                }
            )
    return [g for g in groups if g["params"]]


# -- Muon for the hidden layers, SGD/AdamW for the rest, as one optimizer ----------------------
AUXILIARY = ("sgd", "adamw")
_MUON_KEYS = ("lr", "weight_decay", "momentum", "nesterov", "ns_steps", "adjust_lr_fn")


def is_channels_last(p: torch.Tensor) -> bool:
    """Whether a 4-D tensor (a filter, a batch of images) is stored channels_last (and not also
    plainly contiguous: 1x1)."""
    return (
        p.ndim == 4 and not p.is_contiguous() and p.is_contiguous(memory_format=torch.channels_last)
    )


def _matrix(t: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """(O, I, kh, kw) -> (O, I·kh·kw) (2-D as is), sharing ``t``'s memory where its layout
    allows: a channels_last filter flattens in its memory order (O, kh, kw, I), a column
    permutation, which orthogonalization maps to the same permutation of the update."""
    if t.ndim == 2:
        return t
    if channels_last:
        return t.permute(0, 2, 3, 1).reshape(t.shape[0], -1)
    return t.reshape(t.shape[0], -1)


class MuonHybrid(Optimizer):
    """``torch.optim.Muon`` for the hidden layers' weights, conv filters flattened to 2-D (as
    Keller Jordan's Muon and airbench94_muon do: ``torch.optim.Muon`` itself takes 2-D
    parameters only), and SGD-Nesterov or AdamW (``aux``) for everything else; stepped,
    zeroed, scheduled and checkpointed as one optimizer.

    A param group may say ``"muon": True/False`` (``muon_groups`` does: the head stays off
    Muon); a group without it is split by shape: two or more dimensions to Muon, except
    (``head_off``, where no group has a flag) the last of them in parameter order, the
    classifier head in every registered model, which goes to the other optimizer. ``lr``,
    ``momentum``, ``weight_decay`` (decoupled, torch Muon's) are Muon's; ``aux_*`` the other
    optimizer's. ``normalize_weights``: rescale each Muon weight to norm sqrt(rows) before its
    step, as airbench94_muon does in place of weight decay (the next BatchNorm makes the scale
    irrelevant to the output, so this fixes the effective step size).

    ``param_groups`` holds the real parameters (Lightning's zero_grad, clipping and GradScaler
    see them); Muon steps flattened views of them that share their memory.
    """

    def __init__(
        self,
        params,
        lr: float = 0.24,
        momentum: float = 0.6,
        nesterov: bool = True,
        weight_decay: float = 0.0,
        normalize_weights: bool = True,
        ns_steps: int = 5,
        adjust_lr_fn: str | None = None,
        aux: str = "sgd",
        aux_lr: float = 0.05,
        aux_momentum: float = 0.85,
        aux_weight_decay: float = 0.0,
        head_off: bool = True,
    ):
        if aux not in AUXILIARY:
            raise ValueError(
                f"optimizer.aux={aux!r} is not known; use one of {', '.join(AUXILIARY)}."
            )
        if lr < 0 or aux_lr < 0:
            raise ValueError(f"Muon learning rates must be >= 0, got lr={lr}, aux_lr={aux_lr}.")
        muon_defaults = dict(
            lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
            ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn, normalize_weights=normalize_weights,
        )  # fmt: skip
        on_muon, off_muon = _split_muon(params, head_off)
        public = [{**muon_defaults, **g, "muon": True} for g in on_muon]
        aux_groups = [{**g, "muon": False} for g in off_muon]
        super().__init__(public + aux_groups, {})
        self.aux = None
        if aux_groups:
            if aux == "sgd":
                self.aux = torch.optim.SGD(
                    aux_groups, lr=aux_lr, momentum=aux_momentum, nesterov=aux_momentum > 0,
                    weight_decay=aux_weight_decay,
                )  # fmt: skip
            else:
                self.aux = torch.optim.AdamW(aux_groups, lr=aux_lr, weight_decay=aux_weight_decay)
        self.muon = None
        if public:
            inner = [
                {"params": self._views(g["params"]), **{k: g[k] for k in _MUON_KEYS}}
                for g in public
            ]
            self.muon = torch.optim.Muon(inner, lr=lr)
        self._link()

    def _link(self) -> None:
        """``param_groups``: the Muon side's public groups, then the auxiliary optimizer's
        own dicts (a scheduler's lr change reaches it directly)."""
        muon_side = [g for g in self.param_groups if g["muon"]]
        self.param_groups = muon_side + (self.aux.param_groups if self.aux else [])

    @staticmethod
    def _views(params) -> list[torch.Tensor]:
        views = []
        for p in params:
            view = _matrix(p.detach(), is_channels_last(p))
            if view.data_ptr() != p.data_ptr() or view._base is None and p.ndim != 2:
                raise ValueError(
                    f"MuonHybrid cannot flatten a parameter of shape {tuple(p.shape)} and strides "
                    f"{p.stride()} in place; make it contiguous or channels_last."
                )
            views.append(view)
        return views

    def _sync(self) -> None:
        """Hand Muon this step's hyperparameters (a scheduler sets them on ``param_groups``)
        and gradients, as flattened views; re-view a weight whose memory moved."""
        muon_side = [g for g in self.param_groups if g["muon"]]
        for public, inner in zip(muon_side, self.muon.param_groups):
            inner.update({k: public[k] for k in _MUON_KEYS})
            for i, p in enumerate(public["params"]):
                view = inner["params"][i]
                if view.data_ptr() != p.data_ptr() or view.device != p.device:
                    (new,) = self._views([p])
                    if view in self.muon.state:
                        self.muon.state[new] = self.muon.state.pop(view)
                    inner["params"][i] = view = new
                grad = p.grad
                view.grad = None if grad is None else _matrix(grad, is_channels_last(p))
                if p.grad is not None and public["normalize_weights"]:
                    p.mul_(p.shape[0] ** 0.5 / p.norm().clamp_min(1e-12))  # airbench94_muon

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.muon is not None:
            self._sync()
            self.muon.step()
        if self.aux is not None:
            self.aux.step()
        return loss

    def state_dict(self) -> dict:
        muon_side = [g for g in self.param_groups if g["muon"]]
        return {
            "muon": self.muon.state_dict() if self.muon else None,
            "aux": self.aux.state_dict() if self.aux else None,
            "muon_groups": [{k: v for k, v in g.items() if k != "params"} for g in muon_side],
        }

    def load_state_dict(self, state_dict: dict) -> None:
        if set(state_dict) != {"muon", "aux", "muon_groups"}:
            raise ValueError(
                "This optimizer state was not written by MuonHybrid (optimizer=muon); resume "
                "with the optimizer the checkpoint was trained with."
            )
        if self.muon is not None:
            self.muon.load_state_dict(state_dict["muon"])
            for g, saved in zip(
                (g for g in self.param_groups if g["muon"]), state_dict["muon_groups"]
            ):
                g.update(saved)
        if self.aux is not None:
            self.aux.load_state_dict(state_dict["aux"])
        self._link()

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none)
        if self.muon is not None:
            self.muon.zero_grad(set_to_none)


def _split_muon(params, head_off: bool = True) -> tuple[list[dict], list[dict]]:
    """Param groups (or a list of tensors) -> (Muon's groups, the others'), by each group's
    ``"muon"`` flag, else by shape (two or more dimensions: Muon). ``head_off``: where no group
    has a flag, the last such weight in parameter order (the classifier head of every model
    in the registry: it is built last) goes to the others, as Muon's authors advise."""
    params = list(params)
    groups = params if params and isinstance(params[0], dict) else [{"params": params}]
    flagged = any("muon" in g for g in groups)
    on, off = [], []
    for group in groups:
        tensors = list(group["params"])
        extra = {k: v for k, v in group.items() if k not in ("params", "muon")}
        flag = group.get("muon")
        if flag:
            flat = [tuple(p.shape) for p in tensors if p.ndim < 2]
            if flat:
                raise ValueError(
                    f"A param group marked muon=True holds parameters of shapes {flat}; Muon "
                    "takes weights with 2 or more dimensions (mark that group muon=False)."
                )
        matrices = tensors if flag else [] if flag is False else [p for p in tensors if p.ndim >= 2]
        on.append({"params": matrices, **extra})
        off.append({"params": [p for p in tensors if all(p is not m for m in matrices)], **extra})
    if head_off and not flagged:
        order = {id(p): i for i, p in enumerate(p for g in groups for p in g["params"])}
        last = max((p for g in on for p in g["params"]), key=lambda p: order[id(p)], default=None)
        for g_on, g_off in zip(on, off):
            if any(p is last for p in g_on["params"]):
                g_on["params"] = [p for p in g_on["params"] if p is not last]
                g_off["params"].append(last)
    return [g for g in on if g["params"]], [g for g in off if g["params"]]
