"""``Lookahead``: airbench's lookahead with a rising EMA of the weights.

Every ``every`` optimizer steps the float state (weights and BatchNorm running statistics)
moves into an exponential moving average and the network is reset to that average:
``ema = lerp(ema, net, 1 - decay); net = ema``. The decay grows as ``decay_max *
progress**power`` (``progress`` = step / total steps), so early training is untouched and the
end of training averages strongly. At the last step the network takes the average outright.
Unlike ``EMAWeightAveraging`` the average feeds back into training (it is lookahead, not just
evaluation smoothing), which is what made it worth ~0.2-0.3 points in airbench.
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch


class Lookahead(pl.Callback):
    """Pull the weights back to their moving average every ``every`` steps (see module doc)."""

    def __init__(self, every: int = 5, decay_max: float = 0.95**5, power: float = 3.0) -> None:
        if every < 1:
            raise ValueError(f"Lookahead every must be >= 1 step, got every={every}.")
        if not 0.0 <= decay_max < 1.0:
            raise ValueError(f"Lookahead decay_max must be in [0, 1), got decay_max={decay_max}.")
        self.every, self.decay_max, self.power = every, decay_max, power
        self._ema: dict[str, torch.Tensor] | None = None

    def decay(self, step: int, total: int) -> float:
        """The EMA decay at optimizer step ``step`` of ``total``."""
        return self.decay_max * (min(step, total) / max(total, 1)) ** self.power

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._ema is None:
            self._ema = {k: v.detach().clone() for k, v in _float_state(pl_module).items()}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step, total = trainer.global_step, int(trainer.estimated_stepping_batches)
        if self._ema is None:
            return
        if step >= total:
            self._update(pl_module, 1.0)  # the last step: the network becomes the average
        elif step % self.every == 0:
            self._update(pl_module, self.decay(step, total))

    @torch.no_grad()
    def _update(self, pl_module: pl.LightningModule, decay: float) -> None:
        for name, value in _float_state(pl_module).items():
            ema = self._ema[name]
            ema.lerp_(value.to(ema.dtype), 1.0 - decay)
            value.copy_(ema)

    def state_dict(self) -> dict:
        return {"ema": self._ema}

    def load_state_dict(self, state_dict: dict) -> None:
        self._ema = state_dict.get("ema")


def _float_state(pl_module: pl.LightningModule) -> dict[str, torch.Tensor]:
    # state_dict(keep_vars=True) returns the live parameters and buffers, not copies.
    return {
        k: v for k, v in pl_module.state_dict(keep_vars=True).items() if torch.is_floating_point(v)
    }
