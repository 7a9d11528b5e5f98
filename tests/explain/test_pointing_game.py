"""The pointing game (Zhang et al. 2016): on images whose class is a small patch at a random
place, the heat map's peak must fall inside the patch (grown by one cell of the map) for at
least 80% of held-out images; a model trained on another cue (the background's brightness,
with the patch's colour random) must fail it. Tiny CNNs trained in-process (tests/explain/
pointing.py)."""

from __future__ import annotations

import pytest
import torch
from pointing import SIZE, hits, multilabel_images, patch_images, train

from lightning_cls.explain import Explainer


@pytest.fixture(scope="module")
def patch_model():
    return train("patch", n=192, epochs=4)


@pytest.fixture(scope="module")
def brightness_model():
    return train("brightness", n=128, epochs=2)


def _score(net, spec, cue: str, method: str) -> tuple[float, float]:
    """(accuracy, share of held-out images whose peak is in the patch)."""
    images, labels, corners = patch_images(64, cue, seed=123)
    explainer = Explainer(net, spec, method)
    found = explainer.explain(images)
    accuracy = (found.probs.argmax(1) == labels).float().mean().item()
    cell = SIZE // explainer.map_size[-1]  # the map's resolution: 2 pixels
    return accuracy, hits(found.maps, corners, cell).float().mean().item()


@pytest.mark.parametrize("method", ["gradcam", "cam"])
def test_the_heat_map_points_at_the_patch(patch_model, brightness_model, method):
    accuracy, score = _score(*patch_model, "patch", method)
    assert accuracy >= 0.9  # the model learned the patch
    assert score >= 0.8
    control_accuracy, control = _score(*brightness_model, "brightness", method)
    assert control_accuracy >= 0.9  # it learned its cue too: the game fails for that reason
    assert control < 0.5 and control <= score - 0.4, (score, control)


@pytest.fixture(scope="module")
def multilabel_model():
    return train("multilabel", n=192, epochs=4)


@pytest.mark.parametrize("method", ["gradcam", "cam"])
def test_each_predicted_label_points_at_its_own_patch(multilabel_model, method):
    net, spec = multilabel_model
    images, hot, corners = multilabel_images(32, seed=7, labels_per_image=(2,))
    found = Explainer(net, spec, method).explain(images)
    predicted = found.probs >= spec.decision.threshold
    assert (predicted == hot.bool()).all(1).float().mean() >= 0.8
    # one map per predicted label (the task's decision), each read for that label
    assert sorted(zip(found.image, found.label)) == sorted(map(tuple, predicted.nonzero().tolist()))
    own = hits(found.maps, corners[found.image, found.label], 2)
    assert own.float().mean() >= 0.8
    assert torch.tensor(found.image).unique().numel() == len(images)
