"""What ``module.py`` and ``conf/trainer|logger|scheduler`` use to train: ``optim`` (LR
schedules, parameter groups), ``mixup`` (batch MixUp/CutMix), ``loggers``, ``checkpoint_io``
(atomic checkpoint writes), ``shapes`` (the shape tracer), ``resume`` (``ckpt_path=last`` and
the checkpoint-vs-module check) and ``trials`` (the sweeper's trial constants).

Importing this package loads nothing: each module imports its own dependencies, so the
sweeper can read ``training.trials`` without Lightning.
"""
