"""``Predictor``: any artifact, its preprocessing and flip TTA, behind one batched API.

Predictions equal ``ClassificationModule.predict_step`` on the same images: uint8 images are
normalized with the artifact's mean/std, and the artifact's test-time augmentation (``spec.tta``,
a ``TTA``: ``inference/tta.py``) is applied to the logits before the task turns them into
probabilities (``spec.decision``: softmax, or a sigmoid per class for a multi-label model), as
in training's evaluation.

Arrays in, arrays out: a numpy batch gives numpy results and a torch batch torch results, for
every runtime. A runtime that takes numpy (``Runtime.arrays``: ONNX Runtime, OpenVINO) is run
with numpy throughout (``inference.arrays``), so predict and serve of those files never import
torch; the PyTorch kinds (.ckpt, weights, TorchScript, .pt2) run in torch as before.

Classifying image files and writing the predictions CSV is ``file_predictions.py``'s.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_cls.inference import arrays
from lightning_cls.inference.artifact_checks import check_num_outputs
from lightning_cls.inference.images import check_batch_size
from lightning_cls.inference.rules.msp import MSP
from lightning_cls.inference.runtimes import (  # noqa: F401 (UntrustedArtifactError: re-exported)
    Runtime,
    UntrustedArtifactError,
    open_runtime,
)
from lightning_cls.inference.spec import InputSpec, SpecError
from lightning_cls.inference.tasks import Task
from lightning_cls.inference.tta import flip_tta, selective_tta, tta  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


class Predictor:
    """Runs one artifact on normalized float batches; ``predict_images`` takes uint8 images.

    ``runtime`` is any callable (B, C, H, W) -> logits: a ``Runtime`` from ``load_artifact``
    or an ``nn.Module`` (``Predictor(net, spec)`` runs eager PyTorch). Every method takes a
    numpy array or a tensor and answers in the same kind.
    """

    def __init__(
        self,
        runtime: Callable[[torch.Tensor], torch.Tensor],
        spec: InputSpec,
        kind: str | None = None,
        path: Path | None = None,
        device: str | torch.device | None = None,
    ):
        self.runtime, self.spec = runtime, spec
        self._feature_net = None  # an nn.Module runtime's FeatureNet, built when first asked
        self.kind = kind or getattr(runtime, "kind", "eager")
        self.path = Path(path) if path else Path(f"<{self.kind}>")
        # "numpy": the runtime takes and gives numpy arrays, and so does everything around it.
        self.arrays = getattr(runtime, "arrays", "torch")
        self.device = device or getattr(runtime, "device", "cpu")
        if self.arrays == "torch":
            import torch  # a numpy runtime (ONNX, OpenVINO) never imports torch

            self.device = torch.device(self.device)
        if self.task.needs_features and not self.gives_features:
            raise ValueError(
                f"{self.path.name} has no features output, and its rejection rule "
                f"reject={self.spec.decision.reject['score']} scores the network's features; export "
                "the calibrated checkpoint again (export=onnx|openvino|torchscript|pt2|"
                "executorch|litert write the features output for such a rule), or predict "
                "with the .ckpt."
            )

    @property
    def gives_features(self) -> bool:
        """Whether the runtime answers the penultimate features beside the logits (a
        ``Runtime`` that says so, or an eager ``nn.Module``: ``network.FeatureNet``)."""
        return getattr(self.runtime, "gives_features", self.arrays == "torch")

    def _outputs(self, v):
        """One pass -> (logits, features) of the runtime (or the eager network)."""
        outputs = getattr(self.runtime, "outputs", None)
        if outputs is None:  # an nn.Module given directly
            if self._feature_net is None:
                from lightning_cls.inference.network import with_features  # nn.Module only

                self._feature_net = with_features(self.runtime, self.spec.input_shape)
            outputs = self._feature_net
        return outputs(v)

    def __repr__(self) -> str:
        return f"Predictor({self.kind}: {self.path}, {self.spec.num_classes} classes)"

    @property
    def task(self) -> Task:
        """The artifact's task (decision half): probabilities, predicted labels, score."""
        return self.spec.decision

    def logits(self, x):
        """Normalized float (B, C, H, W) -> logits (B, classes) of one pass (no TTA), on the CPU."""
        self._check_input(x)
        return self._run(x, lambda forward, v: forward(v))

    def tta_logits(self, x):
        """Logits with the artifact's TTA (``spec.tta``: flip, translate), on the CPU; with
        ``spec.tta.threshold`` only for the images whose confidence is below it
        (``selective_tta``), as the training run's test did."""
        if not self.spec.tta.active:
            return self.logits(x)
        self._check_input(x)
        return self._run(x, self._tta)

    def _tta(self, forward: Callable, v):
        """The artifact's TTA of one batch through ``forward`` (full, or selective)."""
        confidence = lambda logits: self.task.confidence(logits, MSP)  # noqa: E731
        return self.spec.tta.logits(forward, v, confidence)

    def _run(self, x, compute: Callable, forward: Callable | None = None):
        """``compute(forward, batch)`` with ``x`` as the runtime takes it (float32, contiguous,
        on its device); the logits back on the CPU, of ``x``'s kind (numpy or tensor).
        ``forward``: what one pass is (default: the runtime's logits)."""
        forward = forward or self.runtime
        if self.arrays == "numpy":
            run = lambda v: forward(np.ascontiguousarray(v))  # noqa: E731
            return arrays.as_kind(compute(run, arrays.as_numpy(x)), x)
        import torch  # torch runtimes only (see __init__)

        with torch.inference_mode():
            batch = torch.from_numpy(x) if arrays.is_numpy(x) else x
            out = compute(forward, batch.float().contiguous().to(self.device)).cpu()
        return out.numpy() if arrays.is_numpy(x) else out

    def predict_proba(self, x, batch_size: int = 64):
        """Normalized float (N, C, H, W) -> probabilities (N, classes), in batches, as the
        task makes them: softmax, or a sigmoid per class for a multi-label model."""
        check_batch_size(batch_size)
        task = self.task
        outs = [
            task.probabilities(self.tta_logits(x[i : i + batch_size]))
            for i in range(0, len(x), batch_size)
        ]
        return arrays.concat(outs, x, self.spec.num_classes)

    def predict_images(self, images, batch_size: int = 64):
        """uint8 (N, C, H, W) -> probabilities (N, classes), preprocessed as in training."""
        return self.task.probabilities(self.image_logits(images, batch_size))

    def image_logits(self, images, batch_size: int = 64):
        """uint8 (N, C, H, W) -> logits (N, classes) with the artifact's TTA, preprocessed as
        in training: what the task's probabilities and rejection score are computed from."""
        return self._images(images, batch_size, self.tta_logits)

    def _images(self, images, batch_size: int, one: Callable):
        """``one`` (a normalized batch -> (B, W) rows) over uint8 ``images`` in batches."""
        check_batch_size(batch_size)
        outs = [
            one(self.spec.preprocess(images[i : i + batch_size]))
            for i in range(0, len(images), batch_size)
        ]
        return arrays.concat(outs, images, self.spec.num_classes)

    def image_outputs(self, images, batch_size: int = 64):
        """uint8 (N, C, H, W) -> ``(logits (N, K), features (N, D) or None)``, with the
        artifact's TTA applied to both (each view's features averaged as its logits are).
        Features only when the rejection rule needs them (``task.needs_features``; else
        ``None``, and this is ``image_logits``); ``image_features`` always gives them."""
        if not self.task.needs_features:
            return self.image_logits(images, batch_size), None
        return self.image_features(images, batch_size)

    def image_features(self, images, batch_size: int = 64):
        """uint8 (N, C, H, W) -> (logits (N, K), features (N, D)), TTA as ``image_outputs``."""
        out = self._images(images, batch_size, self._tta_joined)  # (N, K + D)
        k = self.spec.num_classes
        return out[:, :k], out[:, k:]

    def _tta_joined(self, x):
        """A normalized batch -> (B, K + D): logits and features side by side, so the TTA
        averages each view's features as it averages its logits."""

        def joined(v):
            return arrays.join(*self._outputs(v))

        self._check_input(x)
        k = self.spec.num_classes  # judge the confidence on the logits columns
        confidence = lambda out: self.task.confidence(out[:, :k], MSP)  # noqa: E731
        return self._run(x, lambda forward, v: self.spec.tta.logits(forward, v, confidence), joined)

    @property
    def score_name(self) -> str:
        """What ``accuracy`` measures: the task's score ("accuracy" top-1, "mAP", ...)."""
        return self.task.score_name

    def accuracy(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 256) -> float:
        """The model's score (0..1) on uint8 images (N, C, H, W), as the task scores it: top-1
        accuracy with int labels (N,); for a multi-label model, mAP (macro average precision)
        with multi-hot labels (N, K), the metric its training selects checkpoints by."""
        if len(images) == 0:
            raise ValueError("Cannot measure accuracy on an empty split.")
        self.task.labels.check(labels, self.path.name)
        return self.task.score(self.predict_images(images, batch_size), labels)

    def _check_input(self, x: torch.Tensor) -> None:
        expected = self.spec.input_shape
        if x.ndim != 4 or tuple(x.shape[1:]) != expected:
            raise ValueError(
                f"{self.kind} model expects input (B, {', '.join(map(str, expected))}), "
                f"got {tuple(x.shape)}."
            )


def load_artifact(
    path: str | Path,
    model_name: str | None = None,
    spec: InputSpec | Mapping[str, Any] | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
    threads: int | None = None,
    device: str = "cpu",
    trust_artifact: bool = False,
) -> Predictor:
    """A ``Predictor`` for any artifact whose suffix is in ``runtimes.RUNTIMES``.

    ``spec`` (an ``InputSpec`` or a partial mapping) fills or replaces the stored input
    description, e.g. for an ONNX file written by another tool. ``device`` applies to the
    PyTorch kinds; ONNX files run on ONNX Runtime's CPU provider with ``threads`` intra-op
    threads (default: ORT's choice).

    ``.pt2`` and TorchScript files can run code when loaded; they are refused with an
    ``UntrustedArtifactError`` unless ``trust_artifact=True`` (ONNX, OpenVINO IR and
    checkpoints/weights, read with ``weights_only=True``, are data only). The spec is then
    checked against the model with one dry batch: a model that does not take its
    ``image_size``/``num_channels`` or outputs another number of logits than it has classes
    is a ``ValueError`` naming the field, not a runtime crash later.
    """
    path = Path(path)
    overrides = spec.to_dict() if isinstance(spec, InputSpec) else dict(spec or {})
    runtime: Runtime = open_runtime(
        path,
        trust_artifact=trust_artifact,
        spec=overrides,
        threads=threads,
        device=device,
        model_name=model_name,
        model_kwargs=model_kwargs,
    )
    predictor = Predictor(runtime, runtime.spec, runtime.kind, path, runtime.device)
    check_spec_against_model(predictor)
    return predictor


def check_spec_against_model(predictor: Predictor) -> None:
    """Run one blank image of the spec's shape: the model must take it and give one logit per
    class. Raises ``SpecError`` naming the field to override."""
    spec, name = predictor.spec, predictor.path.name
    x = np.zeros((1, *spec.input_shape), np.float32)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logits = predictor.logits(x)
    except Exception as err:  # every runtime has its own shape errors
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise SpecError(
            "image_size",
            f"{name} does not accept a batch of shape {tuple(x.shape)} (spec image_size="
            f"{spec.image_size}, num_channels={spec.num_channels}): {type(err).__name__}: "
            f"{first}. Fix the spec with +spec.image_size=... / +spec.num_channels=... (the "
            "size the model was trained at), or re-export the model.",
        ) from err
    if logits.ndim != 2 or len(logits) != 1:
        raise ValueError(
            f"{name} returned logits of shape {tuple(logits.shape)} for one image; a classifier "
            "returns (batch, classes)."
        )
    check_num_outputs(predictor.path, spec, logits.shape[1])


# The file half moved to file_predictions.py; its old address still answers.
_MOVED = {"predict_files", "top_k_labels", "write_predictions_csv"}


def __getattr__(name: str):
    # PEP 562, imported on first use: file_predictions needs Predictor's batches, so the
    # file half loads only when its old address is used.
    if name in _MOVED:
        from lightning_cls.inference import file_predictions

        return getattr(file_predictions, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
