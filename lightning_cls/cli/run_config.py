"""Commands given a checkpoint default to the data (and seed) it was trained on.

``python -m lightning_cls.calibrate ckpt_path=<a model trained on a folder of photos>`` used to
compose the default data (the embedded digits) and fail on the channel count. A training run
saves its composed config in ``<run>/.hydra/config.yaml`` and its checkpoints under
``<run>/checkpoints/<experiment>/``: ``with_checkpoint_data(cfg, ckpt)`` finds that file above
the checkpoint and puts the run's ``data`` (and ``seed``: validation is carved from train by
seed) into ``cfg``, unless the command line named them (``data=...``, ``data.<key>=...``,
``seed=...``: an explicit value always wins). ``checkpoint_datamodule(cfg, spec)`` then builds
that data for the model (``lightning_cls.data.for_model``: the model's mean/std, one check).
``checkpoint_file(ckpt_path)`` lets every command that takes ``ckpt_path=`` take a training
run's folder too: the best checkpoint its ``results.json`` names.
Part of the command layer: it reads Hydra's state.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

if TYPE_CHECKING:
    from lightning_cls.data.base import ImageDataModule
    from lightning_cls.inference.spec import InputSpec

log = logging.getLogger(__name__)
SAVED_CONFIG = Path(".hydra") / "config.yaml"
LEVELS = 4  # run/checkpoints/<experiment>/x.ckpt: the run folder is 3 levels above
RESULTS = "results.json"  # a training run's summary (train.py): best_ckpt names its best
FOLDER_SUFFIXES = (".mlpackage",)  # artifacts that are folders (inference/runtimes.py)


def checkpoint_file(ckpt_path: str | Path) -> str:
    """``ckpt_path`` as given, or for a training run's folder the best checkpoint its
    ``results.json`` names (a clear error when the folder has none)."""
    folder = Path(str(ckpt_path))
    if not folder.is_dir() or folder.suffix in FOLDER_SUFFIXES:
        return str(ckpt_path)
    results = folder / RESULTS
    fix = "pass a .ckpt file (or an exported artifact), or a training run's folder"
    if not results.is_file():
        raise FileNotFoundError(f"ckpt_path={ckpt_path} is a folder without {RESULTS}; {fix}.")
    try:
        best = json.loads(results.read_text()).get("best_ckpt") or ""
    except (ValueError, AttributeError):
        best = ""
    if not best:
        raise FileNotFoundError(f"ckpt_path={ckpt_path}: {results} names no best_ckpt; {fix}.")
    path = Path(best)
    if not path.is_file() and not path.is_absolute():
        path = folder / best  # written relative to the run folder
    if not path.is_file():  # the run folder was moved: its checkpoint moved with it
        saved = json.loads(results.read_text()).get("run_dir") or ""
        inside = Path(best).is_relative_to(saved) if saved else False
        path = folder / Path(best).relative_to(saved) if inside else path
    if not path.is_file():
        raise FileNotFoundError(
            f"ckpt_path={ckpt_path}: its {RESULTS} names best_ckpt={best}, which does not exist; "
            f"{fix}."
        )
    log.info("ckpt_path=%s: the run's best checkpoint, %s", ckpt_path, path)
    return str(path)


def run_config_of(ckpt: str | Path) -> Path | None:
    """The ``.hydra/config.yaml`` of the run that wrote ``ckpt`` (None when there is none)."""
    folder = Path(ckpt).resolve().parent
    for _ in range(LEVELS):
        if (folder / SAVED_CONFIG).is_file():
            return folder / SAVED_CONFIG
        folder = folder.parent
    return None


def command_line_keys() -> set[str] | None:
    """The top-level keys the command line overrode (``data``, ``seed``, ...), or None when
    the config was not composed by a command (``compose()`` in a script: its caller chose)."""
    if not HydraConfig.initialized():
        return None
    keys = set()
    for override in HydraConfig.get().overrides.task:
        key = override.split("=", 1)[0].lstrip("+~")
        keys.add(key.split(".", 1)[0].split("@", 1)[0])
    return keys


def with_checkpoint_data(cfg: DictConfig, ckpt: str | Path) -> DictConfig:
    """``cfg`` with the training run's ``data`` and ``seed`` where the command line did not
    give them; unchanged when the run's config is not found or the caller composed ``cfg``."""
    given = command_line_keys()
    saved = run_config_of(ckpt)
    if given is None or saved is None:
        return cfg
    run = OmegaConf.load(saved)
    taken = []
    with open_dict(cfg):
        if "data" not in given and run.get("data") is not None:
            # Unresolved: its interpolations (${seed}, ${paths.data_dir}) resolve in ``cfg``.
            cfg.data = run.data
            taken.append(f"data={cfg.data.get('name')}")
        if "seed" not in given and run.get("seed") is not None:
            cfg.seed = run.seed
            taken.append(f"seed={run.seed}")
    if taken:
        log.info("From the training run's config (%s): %s; pass data=... to override.", saved,
                 ", ".join(taken))  # fmt: skip
    return cfg


def checkpoint_datamodule(
    cfg: DictConfig, spec: InputSpec | Mapping, stage: str = "fit", what: str = "The checkpoint"
) -> ImageDataModule:
    """``cfg.data`` built for the model ``spec`` describes: its mean/std as constructor
    arguments, set up for ``stage``, checked once against the model (``datamodule_for``)."""
    # Imported here: it loads torch (the data check lives beside build_network), which a
    # command's --help and config errors do not pay for (tests/test_layers.py).
    from lightning_cls.data.for_model import datamodule_for

    data_name = f"data={cfg.data.get('name')}"
    channels = cfg.data.get("num_channels")  # the config's promise; null: the source says
    return datamodule_for(spec, partial(instantiate, cfg.data), stage, what, data_name, channels)
