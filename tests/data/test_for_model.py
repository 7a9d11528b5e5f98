"""``datamodule_for``: the DataModule of a trained model gets the model's mean/std through its
constructor and is checked once against the model; a promise of other channels is refused
before anything is built."""

from __future__ import annotations

import pytest

from helpers import make_data
from lightning_cls.data import SyntheticDataModule
from lightning_cls.data.for_model import datamodule_for
from lightning_cls.inference.spec import InputSpec

SPEC = dict(classes=["class_0", "class_1", "class_2", "class_3"], image_size=8, num_channels=1)


def _build(**kwargs):
    return make_data(**kwargs)  # SMALL: 4 classes of 1-channel 8x8 images


def test_the_model_s_mean_and_std_go_into_the_constructor():
    spec = InputSpec(**SPEC, mean=(0.3,), std=(0.2,))
    datamodule = datamodule_for(spec, _build, "fit")
    assert (datamodule.mean, datamodule.std) == ((0.3,), (0.2,))
    assert set(datamodule.splits) == {"train", "val", "test"}  # set up for fit
    plain = datamodule_for({**SPEC}, _build)  # a module built without data: nothing to pass
    assert plain.mean == make_data().mean


def test_other_classes_are_one_line_naming_both_sides():
    spec = InputSpec(**{**SPEC, "classes": ["a", "b", "c", "d"]}, mean=(0.5,), std=(0.5,))
    with pytest.raises(
        ValueError,
        match=r"^The run was trained on other data: classes differ "
        r"\(4 classes vs 4 in data=synthetic",
    ):
        datamodule_for(spec, _build, what="The run", data_name="data=synthetic")


def test_a_promise_of_other_channels_is_refused_before_building():
    built = []

    def build(**kwargs):
        built.append(kwargs)
        return SyntheticDataModule(num_channels=3, **kwargs)

    spec = InputSpec(**SPEC, mean=(0.5,), std=(0.5,))
    with pytest.raises(ValueError, match=r"num_channels=1 but data=x has num_channels=3"):
        datamodule_for(spec, build, data_name="data=x", num_channels=3)
    assert built == []
    # without the promise the constructor is reached (and refuses 1 value for 3 channels)
    with pytest.raises(ValueError, match=r"data\.mean has 1 values but the images have 3"):
        datamodule_for(spec, build, data_name="data=x")
    assert built == [{"mean": [0.5], "std": [0.5]}]
