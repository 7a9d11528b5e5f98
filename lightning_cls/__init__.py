"""lightning_cls: train, export and serve image classifiers with PyTorch Lightning + Hydra."""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"


def config_dir() -> str:
    """Absolute path of the packaged Hydra configs.

    An installed wheel carries them as ``lightning_cls/conf``; a source checkout (editable
    install) keeps them in the repository's top-level ``conf/``.
    """
    here = Path(__file__).resolve().parent
    for candidate in (here / "conf", here.parent / "conf"):
        if (candidate / "train.yaml").is_file():
            return str(candidate)
    raise FileNotFoundError(
        f"lightning_cls configs not found in {here / 'conf'} or {here.parent / 'conf'}; "
        "reinstall the package (pip install lightning-cls) or run from a full checkout."
    )
