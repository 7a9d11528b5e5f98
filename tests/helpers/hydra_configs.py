"""Compose the real Hydra configs in tests, shrunk for CPU."""

from __future__ import annotations

from pathlib import Path


def compose(
    config_name: str = "train", overrides: list[str] | None = None, tmp: Path | None = None
):
    """The config a user's command line would produce, with outputs redirected to ``tmp``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from lightning_cls import config_dir

    base = []
    if tmp is not None:
        base = [
            f"paths.root_dir={tmp}",
            f"paths.output_dir={tmp}/run",
        ]
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=base + (overrides or []))


QUIET_TRAINER = [
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "~callbacks.progress_bar",
    "~callbacks.model_summary",
]
