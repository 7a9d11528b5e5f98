"""Our Grad-CAM against the ``grad-cam`` package (pyproject's ``dev`` extra, pinned
``>=1.5.4,<1.6``), the reference implementation: the same maps for a flatten + MLP head
(simplecnn) and a global max-pool head (airbench). lightning_cls does not call the package at run time: importing it loads
scikit-learn, pandas, SciPy and OpenCV (5-10 s on the 2-core machine) for what is a few tensor
lines here (``lightning_cls/explain/methods.py``). This test is where a release that changes
what Grad-CAM computes would show; most of its time is that import."""

from __future__ import annotations

import pytest
import torch

from lightning_cls.explain import Explainer
from lightning_cls.inference.spec import InputSpec
from lightning_cls.models import create_model

SIZE = 16
SPEC = InputSpec(
    classes=tuple("abcdef"), mean=(0.5,) * 3, std=(0.25,) * 3, image_size=SIZE, num_channels=3
)


@pytest.mark.parametrize("name", ["simplecnn", "airbench"])  # resnet18: its backward costs 1-2 s
def test_our_grad_cam_equals_the_grad_cam_package(name):
    grad_cam = pytest.importorskip("pytorch_grad_cam")
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    torch.manual_seed(0)
    net = create_model(name, num_classes=6, image_size=SIZE).eval()
    images = torch.randint(0, 256, (4, 3, SIZE, SIZE), dtype=torch.uint8)
    explainer = Explainer(net, SPEC)
    ours = explainer.explain(images, target=2).maps
    reference = grad_cam.GradCAM(model=net, target_layers=[explainer.module])
    try:
        theirs = reference(
            input_tensor=SPEC.preprocess(images), targets=[ClassifierOutputTarget(2)] * 4
        )
    finally:
        reference.activations_and_grads.release()
    assert torch.allclose(ours, torch.from_numpy(theirs), atol=1e-4)
