"""The ``Sweeper`` Hydra instantiates. It only holds the settings: Hydra imports this module
on every start, so Optuna is imported by ``_impl`` when a sweep actually runs."""

from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class OptunaSweeper(Sweeper):
    """Optuna search over Hydra overrides; see ``config.OptunaSweeperConf`` for the settings."""

    def __init__(self, **settings: Any) -> None:
        try:
            import optuna  # noqa: F401
        except ImportError as err:
            raise ImportError(
                "hydra/sweeper=optuna (hparams_search=...) needs Optuna: "
                "pip install 'lightning-cls[sweep]'."
            ) from err
        from hydra_plugins.lightning_cls_optuna_sweeper._impl import OptunaSweeperImpl

        self.impl = OptunaSweeperImpl(**settings)

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.impl.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        return self.impl.sweep(arguments)
