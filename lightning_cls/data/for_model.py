"""The DataModule for a trained model: its preprocessing in, its data checked once.

Every command given a model (eval, calibrate, export's INT8 and ``auto``) needs the model's
data the same way: built with the model's own mean/std (the normalisation it learned with,
whatever the data source would compute), prepared, set up, and compared with what the model
was trained on (class names in order, channels, image size) before any work. ``datamodule_for``
is that prelude; ``setup_checked`` is its second half, for a DataModule built elsewhere.

The mean/std go in as constructor arguments, never written into the DataModule afterwards:
a source that derives them (``data=streaming`` reads its ``dataset.json``) has them read-only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from lightning_cls.inference.network import check_same_data
from lightning_cls.inference.spec import InputSpec

if TYPE_CHECKING:
    from lightning_cls.data.base import ImageDataModule


def datamodule_for(
    spec: InputSpec | Mapping[str, Any],
    build: Callable[..., ImageDataModule],
    stage: str = "fit",
    what: str = "The checkpoint",
    data_name: str = "the data",
    num_channels: int | None = None,
) -> ImageDataModule:
    """The DataModule ``build(mean=..., std=...)`` returns, set up for ``stage`` and checked
    against ``spec``: the model's input description, or the mapping it is stored as (a
    checkpoint's hyper-parameters; a module built without data may lack keys, then those are
    neither passed nor compared).

    1. ``num_channels``, what the data's config promises (None: the source says once read),
       is compared with the model's before anything is built: the model's mean/std have one
       value per channel and would not fit other images.
    2. ``build`` gets the model's mean/std as keyword arguments (Hydra: ``partial(instantiate,
       cfg.data)``; Python: the DataModule class).
    3. ``setup_checked``: prepared, set up, compared with ``spec``; a difference is one
       ``ValueError`` naming ``what`` and ``data_name`` and both sides.
    """
    trained = _as_dict(spec)
    if num_channels is not None:
        check_same_data(trained, {"num_channels": num_channels}, what, data_name)
    preprocessing = {k: list(trained[k]) for k in ("mean", "std") if trained.get(k) is not None}
    datamodule = build(**preprocessing)
    return setup_checked(datamodule, trained, stage, what, data_name)


def setup_checked(
    datamodule: Any,
    spec: InputSpec | Mapping[str, Any],
    stage: str = "fit",
    what: str = "The checkpoint",
    data_name: str = "the data",
) -> Any:
    """``datamodule`` prepared (``prepare_data``: downloads, caches), set up for ``stage`` and
    checked against ``spec``: calibrating on, evaluating or exporting against other classes
    would be silently wrong. Returns ``datamodule``."""
    datamodule.prepare_data()
    datamodule.setup(stage)
    check_same_data(spec, datamodule.spec, what, data_name)
    return datamodule


def _as_dict(spec: InputSpec | Mapping[str, Any]) -> dict[str, Any]:
    return spec.to_dict() if isinstance(spec, InputSpec) else dict(spec)
