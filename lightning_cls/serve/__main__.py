"""``python -m lightning_cls.serve ckpt_path=model.onnx [serve.port=8000 serve.workers=1 ...]``.

Reads top to bottom: compose the config → a ``ServeConfig`` (checked: host, port, limits,
thread budget) → ``serve`` (loads and warms up the model, binds the port, serves until
SIGTERM/Ctrl+C). A user error ends in one line on stderr and exit code 1.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf

from lightning_cls import config_dir
from lightning_cls.cli import run_cli
from lightning_cls.cli.run_config import checkpoint_file
from lightning_cls.serve.config import ServeConfig


def make_config(cfg: DictConfig) -> ServeConfig:
    return ServeConfig(
        artifact=checkpoint_file(cfg.ckpt_path),  # a run folder: its best checkpoint
        trust_artifact=cfg.trust_artifact,
        model_name=cfg.get("model_name"),
        spec=OmegaConf.to_container(cfg.spec) if cfg.get("spec") else {},
        **OmegaConf.to_container(cfg.serve, resolve=True),
    )


@hydra.main(config_path=config_dir(), config_name="serve", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from lightning_cls.serve.server import exit_now, serve  # the runtimes: not for --help

    serve(make_config(cfg))  # a user error ends in one `error: ...` line and exit 1 (run_cli)
    exit_now()  # drained: see exit_now


if __name__ == "__main__":
    run_cli(main)
