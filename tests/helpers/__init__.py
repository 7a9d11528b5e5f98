"""Test helpers: the one tiny-data/tiny-module factory (``tiny.py``) and what is trained with it
once per test process and read by many tests (``trained.py``). Beside them: the real configs
composed small (``hydra_configs.py``), the shared multi-label run (``multilabel.py``), the fork
server and the gloo ranks (with ``multilabel_gather.py``, one body they run)."""

from helpers.tiny import (
    LEARNABLE,
    SGD,
    SMALL,
    as_overrides,
    colour_photos,
    fit,
    fit_plain_simplecnn,
    make_data,
    make_module,
    make_trainer,
)
from helpers.trained import (
    TRAINED_OVERRIDES,
    Artifacts,
    Trained,
    ask_server,
    make_untrained,
    png_bytes,
    trained_artifacts,
    trained_model,
)

__all__ = [
    "LEARNABLE",
    "SGD",
    "SMALL",
    "TRAINED_OVERRIDES",
    "Artifacts",
    "Trained",
    "as_overrides",
    "ask_server",
    "colour_photos",
    "fit",
    "fit_plain_simplecnn",
    "make_data",
    "make_module",
    "make_trainer",
    "make_untrained",
    "png_bytes",
    "trained_artifacts",
    "trained_model",
]
