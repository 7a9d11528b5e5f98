"""One trained multi-label run per test process, shared by the multi-label tests of each
package (tests/training, inference, export, serve): trained once, not once per file."""

from __future__ import annotations

from pathlib import Path

from helpers.hydra_configs import QUIET_TRAINER, compose
from lightning_cls.data.multilabel import write_color_squares

# The learnable task of write_color_squares: a square of each present colour on noise.
# Five epochs of SimpleCNN reach a test mAP above this (0.97-0.99 measured); chance is ~0.4.
STATED_TEST_MAP = 0.9
QUIET = [*QUIET_TRAINER, "~callbacks.plots", "logger=csv"]
_CACHE: dict[str, object] = {}


def squares(tmp_path_factory) -> Path:
    """320/80/80 colour-square images with a CSV index per split."""
    if "squares" not in _CACHE:
        root = tmp_path_factory.mktemp("squares")
        _CACHE["squares"] = write_color_squares(root, {"train": 320, "val": 80, "test": 80})
    return _CACHE["squares"]


def multilabel_run(tmp_path_factory) -> dict:
    """results.json of ``train task=multilabel data=multilabel export=onnx``, 5 epochs."""
    if "run" not in _CACHE:
        from lightning_cls.train import train

        overrides = [
            *QUIET,
            "task=multilabel",
            "data=multilabel",
            f"data.root={squares(tmp_path_factory)}",
            "trainer.max_epochs=5",
            "export=onnx",
        ]
        tmp = tmp_path_factory.mktemp("multilabel_run")
        _CACHE["run"] = train(compose(overrides=overrides, tmp=tmp))
    return _CACHE["run"]
