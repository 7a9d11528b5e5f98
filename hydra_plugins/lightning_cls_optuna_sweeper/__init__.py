"""Hydra sweeper ``hydra/sweeper=optuna``: Optuna search with pruning across processes.

Same YAML shape as lightning-hydra-template's ``hparams_search`` (``direction``, ``n_trials``,
``n_jobs``, ``sampler``, ``storage``, ``params`` in Hydra's override grammar) on current
Optuna. Installed with the ``sweep`` extra: ``pip install "lightning-cls[sweep]"``.
"""
