"""What the Optuna sweeper (``hydra_plugins/``) and the ``OptunaPruning`` callback agree on.

Plain constants: the sweeper imports them without loading Lightning or optuna.
"""

PRUNER_ATTR = "pruner"  # study user attribute: {"_target_": "optuna.pruners.X", **kwargs}
PRUNED_ATTR = "pruned_at_epoch"  # trial user attribute set when the pruner stops a run
