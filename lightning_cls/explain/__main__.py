"""``python -m lightning_cls.explain ckpt_path=<.ckpt> inputs=<files or folder> output=<folder>``:
heat maps of where the model looked, one overlay PNG per image (per predicted label of a
multi-label model), ``explanations.csv`` and ``mosaic.png`` (true/predicted labels, wrong ones
marked when the files sit in class-named folders). ``method=gradcam|cam``, ``layer=<module
name>`` and ``target=<class>`` choose what is drawn. A user error ends in one ``error:`` line
and exit code 1."""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig, OmegaConf

from lightning_cls import config_dir
from lightning_cls.cli import run_cli
from lightning_cls.cli.run_config import checkpoint_file

log = logging.getLogger(__name__)


def explain(cfg: DictConfig) -> list[dict]:
    cfg.ckpt_path = checkpoint_file(cfg.ckpt_path)  # a training run's folder: its best .ckpt
    for key in ("batch_size", "scale"):
        if not isinstance(cfg[key], int) or isinstance(cfg[key], bool) or cfg[key] < 1:
            raise ValueError(f"{key}={cfg[key]} must be an integer >= 1; e.g. {key}=4.")
    # Imported here: --help and config errors load no torch (the light-path rule).
    from lightning_cls.explain import explain_files, load_explainer
    from lightning_cls.inference import find_images

    explainer = load_explainer(
        cfg.ckpt_path, method=cfg.method, layer=cfg.layer, model_name=cfg.get("model_name")
    )
    log.info("Explaining with %s", explainer)
    inputs = OmegaConf.to_container(cfg.inputs) if OmegaConf.is_list(cfg.inputs) else [cfg.inputs]
    return explain_files(
        explainer,
        find_images(inputs),
        cfg.output,
        target=cfg.target,
        batch_size=cfg.batch_size,
        mosaic=bool(cfg.mosaic),
        scale=cfg.scale,
    )


@hydra.main(config_path=config_dir(), config_name="explain", version_base="1.3")
def main(cfg: DictConfig) -> None:
    explain(cfg)


if __name__ == "__main__":
    run_cli(main)
