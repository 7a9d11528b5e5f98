"""The data check (``python -m lightning_cls.doctor data=...``): reads a dataset as training
does and reports unreadable files, odd sizes and modes, duplicates within and across splits,
class imbalance and likely label errors, without changing the data.

``diagnose(datamodule, out_dir, DoctorOptions(...), TrainRecipe(...))`` is the library entry;
the modules are one check each (``files``, ``duplicates``, ``labels``), the probes that give
the label check its out-of-fold probabilities (``probes``, ``kfold``), the settings
(``options``), the pictures (``mosaics``), the report (``report``) and the cleaned index
(``index``). Needs the ``doctor`` extra (imagehash,
cleanlab), imported only where a check runs.
"""

from __future__ import annotations

__all__ = ["DoctorOptions", "TrainRecipe", "diagnose"]


def __getattr__(name: str):  # PEP 562: `import lightning_cls.doctor` stays light
    if name in __all__:
        from lightning_cls.doctor import run

        return getattr(run, name)
    raise AttributeError(f"module 'lightning_cls.doctor' has no attribute {name!r}")
