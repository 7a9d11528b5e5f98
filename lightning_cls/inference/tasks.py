"""Tasks, decision half: logits -> probabilities -> labels, the threshold, and the score.

A task is one object (timm's ``timm/task/classification.py``): code that serves every task
(``Predictor``, the server's batcher, the prediction mosaic, the INT8 and ``export=auto``
gates) asks it and never branches on its name. The learning half (loss, metrics, the choice
of the threshold on validation) lives in ``lightning_cls.training.tasks``; this half imports
neither Lightning nor Hydra, so predict and serve stay light.

``TASKS`` maps a name (``InputSpec.task``, a checkpoint's task) to a class; ``create_task(name,
threshold, temperature, reject, conformal)`` builds one, the one place a decision gets what
calibration chose. A new task registers once, with ``lightning_cls.training.tasks.register_task``
(its learning half and this half under one name); a decision-only plug-in (predict and serve,
never trained here) may register its class in ``TASKS`` or the ``lightning_cls.tasks``
entry-point group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from lightning_cls.inference import arrays, trust
from lightning_cls.inference.arrays import Decision
from lightning_cls.inference.conformal import prediction_sets
from lightning_cls.inference.task_calibration import SigmoidCalibration, SoftmaxCalibration
from lightning_cls.inference.task_labels import ClassLabels, MultiHotLabels
from lightning_cls.inference.task_rows import MultiLabelRows, TopKRows
from lightning_cls.registry import Registry

if TYPE_CHECKING:
    import torch

DEFAULT_THRESHOLD = 0.5  # a multi-label model's decision threshold before one is chosen on val

TASKS = Registry("task", "lightning_cls.tasks")


class Task:
    """The decision half of a task: what every task shares (its trust settings, the rejection
    rule's verdicts, prediction sets) and what each decides for itself (``probabilities``,
    ``energy``, ``decide``, ``predicted``, ``score``: ``MultiClass``, ``MultiLabel``).
    ``threshold`` is ``None`` for a task without one. ``probabilities`` and ``decide`` take a
    numpy array or a torch tensor (``inference.arrays``): the ONNX and OpenVINO paths of
    predict and serve never import torch.

    The other concerns are objects it hands out: ``calibration`` (the calibration maths,
    ``task_calibration.py``), ``labels`` (what a label is, ``task_labels.py``) and ``rows()``
    (predict's rows and CSV columns, ``task_rows.py``). Drawing lives in ``figures/``.
    """

    name: ClassVar[str]
    score_name: ClassVar[str]  # what ``score`` measures, in reports and gates
    multi_hot: ClassVar[bool]  # labels: (N,) class indices, or (N, K) multi-hot rows
    calibration_class: ClassVar[type[SoftmaxCalibration]]
    labels_class: ClassVar[type[ClassLabels]]
    rows_class: ClassVar[type[TopKRows]]

    def __init__(
        self,
        threshold: float | None = None,
        temperature: float | Sequence[float] = 1.0,
        reject: Mapping[str, Any] | None = None,
        conformal: Mapping[str, Any] | None = None,
    ):
        self.threshold: float | None = None  # no threshold: a threshold given is not used
        # What the answers are worth (``inference/trust.py``): the logits are divided by
        # ``temperature`` before the probabilities; ``reject`` ({score, threshold, keep} or None)
        # turns an image whose confidence is below the threshold into ``unknown``.
        self.temperature: float | tuple[float, ...] = (
            temperature if isinstance(temperature, (int, float)) else tuple(temperature)
        )
        self.reject: dict[str, Any] | None = None if reject is None else dict(reject)
        # ``conformal`` ({method, alpha, qhat, lam, k_reg, images} or None, ``inference/
        # conformal.py``) gives each image a prediction set, from the probabilities after ``T``.
        self.conformal: dict[str, Any] | None = None if conformal is None else dict(conformal)
        self.calibration = self.calibration_class()
        self.labels = self.labels_class(self.name)

    def trust(self) -> dict[str, Any]:
        """What calibration chose for this decision (``temperature``, ``reject``,
        ``conformal``), as plain containers: what a checkpoint's task carries."""
        temperature = self.temperature
        plain = temperature if isinstance(temperature, (int, float)) else list(temperature)
        return {"temperature": plain, "reject": self.reject, "conformal": self.conformal}

    def __repr__(self) -> str:
        extra = "" if self.threshold is None else f"threshold={self.threshold:g}"
        return f"{type(self).__name__}({extra})"

    def rows(self) -> TopKRows:
        """Predict's rows and CSV columns for this decision (its rule adds columns)."""
        return self.rows_class(self.reject, self.conformal)

    def probabilities(self, logits):
        """(B, K) logits -> (B, K) float32 probabilities, of the kind given (numpy or torch),
        after the temperature."""
        raise NotImplementedError(f"{type(self).__name__} must define probabilities(logits).")

    def energy(self, logits):
        """(B, K) logits -> (B,) negative free energy: higher means more in-distribution."""
        raise NotImplementedError(f"{type(self).__name__} must define energy(logits).")

    @property
    def needs_features(self) -> bool:
        """Whether the rejection rule scores the network's features (``knn``,
        ``mahalanobis``), not its logits: the runtime must give them too."""
        return self.reject is not None and trust.rule_of(self.reject["score"]).needs_features

    def confidence(self, logits, score: str | None = None, features=None):
        """(B, K) logits -> (B,) confidence by ``score`` (default: the rejection rule's):
        a registered rule (``reject_rules.REJECT_RULES``): ``msp`` the largest probability,
        ``energy`` the task's ``energy``; ``knn`` and ``mahalanobis`` score the (B, D)
        ``features`` with the stored rule's parameters. Higher = more familiar, for every
        score."""
        score = score or (self.reject or {}).get("score")
        rule = trust.rule_of(score)
        if rule.needs_features and (self.reject is None or self.reject["score"] != score):
            raise ValueError(
                f"score={score} needs the rule fitted on the training features; this model's "
                f"rule is {(self.reject or {}).get('score')}: fit reject={score} first."
            )
        return rule.scores(self, logits, features, self.reject)

    def verdicts(self, logits, features=None) -> list[tuple[bool, float]] | None:
        """Per image (unknown, confidence) by the rejection rule; None without one."""
        if self.reject is None:
            return None
        scores = [float(s) for s in self.confidence(logits, features=features).tolist()]
        return [(s < self.reject["threshold"], s) for s in scores]

    def decide(self, probs, k: int) -> Decision:
        """(B, K) probabilities -> per row the predicted class indices, most probable first,
        and their probabilities."""
        raise NotImplementedError(f"{type(self).__name__} must define decide(probs, k).")

    def predicted(self, probs: torch.Tensor) -> torch.Tensor:
        """(B, K) probabilities -> the prediction as a label tensor (``labels``' kind)."""
        raise NotImplementedError(f"{type(self).__name__} must define predicted(probs).")

    def score(self, probs: torch.Tensor, labels: torch.Tensor) -> float:
        """The model's score (0..1) on probabilities (N, K) and labels."""
        raise NotImplementedError(f"{type(self).__name__} must define score(probs, labels).")

    def sets(self, probs) -> list[list[int]] | None:
        """(B, K) probabilities (after the temperature) -> per image its prediction set: class
        indices, most probable first, never empty; None without a fitted ``conformal`` rule."""
        if self.conformal is None:
            return None
        return prediction_sets(arrays.as_numpy(probs), self.conformal)


class MultiClass(Task):
    """One label per image (the default task): softmax, the top-k classes, top-1 accuracy."""

    name = "multiclass"
    score_name = "accuracy"
    multi_hot = False
    calibration_class = SoftmaxCalibration
    labels_class = ClassLabels
    rows_class = TopKRows

    def probabilities(self, logits):
        return arrays.softmax(trust.scaled(logits, self.temperature))

    def energy(self, logits):
        """Negative free energy ``logsumexp(z / T)`` (Liu et al. 2020)."""
        return trust.logsumexp(trust.scaled(logits, self.temperature))

    def decide(self, probs, k: int) -> Decision:
        """The ``k`` most probable classes."""
        return arrays.top_k(probs, k)

    def predicted(self, probs: torch.Tensor) -> torch.Tensor:
        """(B,) class indices."""
        return probs.argmax(1)

    def score(self, probs: torch.Tensor, labels: torch.Tensor) -> float:
        """Top-1 accuracy."""
        return (probs.argmax(1) == labels).float().mean().item()


class MultiLabel(Task):
    """Any number of labels per image: one sigmoid per class; every label whose probability
    reaches ``threshold`` is predicted (none above it: an empty list); mAP as the score."""

    name = "multilabel"
    score_name = "mAP"
    multi_hot = True
    calibration_class = SigmoidCalibration
    labels_class = MultiHotLabels
    rows_class = MultiLabelRows

    def __init__(self, threshold: float | None = None, **trust: Any):
        super().__init__(**trust)
        if threshold is not None and (
            isinstance(threshold, bool)
            or not isinstance(threshold, (int, float))
            or not 0 < threshold < 1
        ):
            raise ValueError(
                f"task.threshold={threshold!r} is not a probability; set a number strictly "
                "between 0 and 1, or auto to choose it on the validation split."
            )
        self.threshold = DEFAULT_THRESHOLD if threshold is None else float(threshold)

    def probabilities(self, logits):
        return arrays.sigmoid(trust.scaled(logits, self.temperature))

    def energy(self, logits):
        """JointEnergy ``sum_k softplus(z_k / T_k)`` (Wang et al. 2021): the labels' evidence
        summed, higher means more in-distribution."""
        return trust.softplus_sum(trust.scaled(logits, self.temperature))

    def decide(self, probs, k: int) -> Decision:
        """Every label at or above the threshold (``k`` does not cut them)."""
        order, ranked = arrays.ranked(probs)  # (B, K) each, most probable first
        keep = (ranked >= self.threshold).sum(1).tolist()
        return (
            [row[:n] for row, n in zip(order.tolist(), keep)],
            [row[:n] for row, n in zip(ranked.tolist(), keep)],
        )

    def predicted(self, probs: torch.Tensor) -> torch.Tensor:
        return probs >= self.threshold  # (B, K) bool

    def score(self, probs: torch.Tensor, labels: torch.Tensor) -> float:
        """mAP (macro average precision)."""
        from lightning_cls.inference.scores import mean_average_precision

        return mean_average_precision(probs, labels)


TASKS.register("multiclass")(MultiClass)
TASKS.register("multilabel")(MultiLabel)


def create_task(
    name: str = "multiclass",
    threshold: float | None = None,
    temperature: float | Sequence[float] = 1.0,
    reject: Mapping[str, Any] | None = None,
    conformal: Mapping[str, Any] | None = None,
) -> Task:
    """The decision task registered as ``name``; ``threshold`` for a task that has one;
    ``temperature`` and ``reject`` as ``inference/trust.py`` describes, ``conformal`` as
    ``inference/conformal.py`` does (checked by ``InputSpec``)."""
    return TASKS.get(str(name))(
        threshold=threshold, temperature=temperature, reject=reject, conformal=conformal
    )
