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
from lightning_cls.registry import Registry

if TYPE_CHECKING:
    import torch

DEFAULT_THRESHOLD = 0.5  # a multi-label model's decision threshold before one is chosen on val

TASKS = Registry("task", "lightning_cls.tasks")


class Task:
    """The decision half of a task. These defaults are the multi-class ones (one label per
    image: softmax, the top-k classes, top-1 accuracy); a subclass overrides what differs.
    ``threshold`` is ``None`` for a task without one. ``probabilities`` and ``decide`` take a
    numpy array or a torch tensor (``inference.arrays``): the ONNX and OpenVINO paths of
    predict and serve never import torch.
    """

    name: ClassVar[str] = "multiclass"
    score_name: ClassVar[str] = "accuracy"  # what ``score`` measures, in reports and gates
    multi_hot: ClassVar[bool] = False  # labels: (N,) class indices, or (N, K) multi-hot rows

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

    def trust(self) -> dict[str, Any]:
        """What calibration chose for this decision (``temperature``, ``reject``,
        ``conformal``), as plain containers: what a checkpoint's task carries."""
        temperature = self.temperature
        plain = temperature if isinstance(temperature, (int, float)) else list(temperature)
        return {"temperature": plain, "reject": self.reject, "conformal": self.conformal}

    def __repr__(self) -> str:
        extra = "" if self.threshold is None else f"threshold={self.threshold:g}"
        return f"{type(self).__name__}({extra})"

    def probabilities(self, logits):
        """(B, K) logits -> (B, K) float32 probabilities, of the kind given (numpy or torch),
        after the temperature."""
        return arrays.softmax(trust.scaled(logits, self.temperature))

    def energy(self, logits):
        """(B, K) logits -> (B,) negative free energy ``logsumexp(z / T)`` (Liu et al. 2020):
        higher means more in-distribution."""
        return trust.logsumexp(trust.scaled(logits, self.temperature))

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
        and their probabilities: here the ``k`` most probable classes."""
        return arrays.top_k(probs, k)

    def predicted(self, probs: torch.Tensor) -> torch.Tensor:
        """(B, K) probabilities -> the prediction as a label tensor: (B,) class indices."""
        return probs.argmax(1)

    def encode(self, names: Sequence[str], classes: Sequence[str]) -> torch.Tensor:
        """Predicted class names (most probable first) -> the label tensor of one image."""
        import torch

        return torch.tensor(list(classes).index(names[0]))

    def label_of_folder(self, folder: str, classes: Sequence[str]) -> torch.Tensor | None:
        """The true label of a file in an ImageFolder layout (its parent folder's name), or
        None when the folder says nothing."""
        import torch

        return torch.tensor(list(classes).index(folder)) if folder in classes else None

    def score(self, probs: torch.Tensor, labels: torch.Tensor) -> float:
        """The model's score (0..1) on probabilities (N, K) and labels: top-1 accuracy."""
        return (probs.argmax(1) == labels).float().mean().item()

    # -- calibration (training/calibration.py), data reports (doctor, mosaic) -----------------
    def temperatures(self, num_classes: int) -> int:
        """How many temperatures calibration fits: one, for the softmax over all classes."""
        return 1

    def nll(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The negative log-likelihood of ``labels`` given (scaled) ``logits``: cross-entropy."""
        import torch.nn.functional as F

        return F.cross_entropy(logits.float(), labels.long())

    def reliability(self, probs: torch.Tensor, labels: torch.Tensor):
        """(confidence, correct) pairs of a reliability diagram: the top-1 probability and
        whether the top-1 class is the label, per image."""
        confidence, predicted = probs.max(1)
        return confidence, (predicted == labels).float()

    def calibration_error(self, probs: torch.Tensor, labels: torch.Tensor, bins: int) -> float:
        """ECE (torchmetrics, ``bins`` equal-width bins, L1) of the top-1 confidence."""
        from torchmetrics.functional.classification import multiclass_calibration_error

        probs = probs.detach().float()
        return multiclass_calibration_error(
            probs, labels.long(), probs.shape[1], n_bins=bins
        ).item()

    def choose_threshold(self, probs: torch.Tensor, labels: torch.Tensor) -> float | None:
        """The decision threshold best on (validation) ``probs``; None: no threshold."""
        return None

    def label_counts(self, labels: torch.Tensor, num_classes: int) -> list[int]:
        """Images per class (the doctor's class balance)."""
        import torch

        return torch.bincount(labels.long(), minlength=num_classes)[:num_classes].tolist()

    def errors_panel(self, true: torch.Tensor, pred: torch.Tensor, classes: Sequence[str]):
        """The prediction mosaic's side panel: (values, support, (title, axis), heading,
        lines): per-class accuracy and the most confused pairs."""
        from lightning_cls.inference.mosaic import confusion, most_confused

        matrix = confusion(true, pred, len(classes))
        support = matrix.sum(1)
        values = (matrix.diag().double() / support.clamp(min=1)).tolist()
        lines = [f"{t} → {p}: {n}" for t, p, n in most_confused(matrix, classes)]
        names = ("per-class accuracy", "accuracy")
        return values, support, names, "most confused (true → pred)", lines or ["no confusions"]

    def check_labels(self, labels: torch.Tensor, source: str) -> None:
        """A ``ValueError`` when ``labels`` have another shape than this task's."""
        if (labels.ndim == 2) != self.multi_hot:
            want = (
                "give multi-hot (N, labels) rows: data=multilabel."
                if self.multi_hot
                else "give one class index per image: a single-label dataset."
            )
            raise ValueError(
                f"{source} is a {self.name} model but the labels have shape "
                f"{tuple(labels.shape)}; {want}"
            )

    def row(self, indices: list[int], values: list[float], probs: list[float], classes) -> dict:
        """One row of ``predict_files``: ``labels`` and ``probs``, most probable first."""
        return {"labels": [classes[i] for i in indices], "probs": values}

    def sets(self, probs) -> list[list[int]] | None:
        """(B, K) probabilities (after the temperature) -> per image its prediction set: class
        indices, most probable first, never empty; None without a fitted ``conformal`` rule."""
        if self.conformal is None:
            return None
        return prediction_sets(arrays.as_numpy(probs), self.conformal)

    def judged(
        self, row: dict, verdict: tuple[bool, float] | None, members: list[str] | None = None
    ) -> dict:
        """``row`` with the rejection rule's answer: ``unknown`` (True when the confidence is
        below the threshold) and ``score``; with a prediction set, ``set`` (its labels);
        unchanged without either."""
        if verdict is not None:
            row = {**row, "unknown": verdict[0], "score": verdict[1]}
        return row if members is None else {**row, "set": list(members)}

    def answer(self, row: Mapping[str, Any]) -> str:
        """What the model answers for a judged row: ``unknown``, or its label(s)."""
        return trust.UNKNOWN if row.get("unknown") else ";".join(row["labels"][:1])

    def _judged_header(self) -> list[str]:
        rule = [] if self.reject is None else ["answer", f"{self.reject['score']}_score"]
        return rule + ([] if self.conformal is None else ["set"])

    def _judged_cells(self, row: Mapping[str, Any]) -> list[str]:
        rule = [] if self.reject is None else [self.answer(row), f"{row['score']:.6f}"]
        return rule + ([] if self.conformal is None else [";".join(row["set"])])

    def csv_header(self, classes: Sequence[str], top_k: int) -> list[str]:
        """The predictions CSV's columns: file, label_1..k, prob_1..k, error; with a rejection
        rule, answer (the label or ``unknown``) and the confidence score after file; with a
        prediction set, ``set`` (its labels joined by ``;``) after them."""
        labels = [f"label_{i + 1}" for i in range(top_k)]
        probs = [f"prob_{i + 1}" for i in range(top_k)]
        return ["file", *self._judged_header(), *labels, *probs, "error"]

    def csv_row(self, row: Mapping[str, Any], top_k: int) -> list[str]:
        labels = row["labels"] + [""] * (top_k - len(row["labels"]))
        probs = [f"{p:.6f}" for p in row["probs"]] + [""] * (top_k - len(row["probs"]))
        return [row["file"], *self._judged_cells(row), *labels, *probs, ""]

    def csv_failure(self, path: str, reason: str, classes: Sequence[str], top_k: int) -> list:
        return [path, *[""] * (len(self._judged_header()) + 2 * top_k), reason]


class MultiClass(Task):
    """One label per image (the default task): softmax, top-k, accuracy."""

    name = "multiclass"


class MultiLabel(Task):
    """Any number of labels per image: one sigmoid per class; every label whose probability
    reaches ``threshold`` is predicted (none above it: an empty list); mAP as the score."""

    name = "multilabel"
    score_name = "mAP"
    multi_hot = True

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

    def answer(self, row: Mapping[str, Any]) -> str:
        return trust.UNKNOWN if row.get("unknown") else ";".join(row["labels"])

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

    def encode(self, names: Sequence[str], classes: Sequence[str]) -> torch.Tensor:
        import torch

        hot = torch.zeros(len(classes), dtype=torch.bool)
        hot[[list(classes).index(n) for n in names]] = True
        return hot

    def label_of_folder(self, folder: str, classes: Sequence[str]) -> torch.Tensor | None:
        return None  # a folder names at most one label

    def score(self, probs: torch.Tensor, labels: torch.Tensor) -> float:
        from lightning_cls.inference.scores import mean_average_precision

        return mean_average_precision(probs, labels)

    def temperatures(self, num_classes: int) -> int:
        """One temperature per label: each has its own sigmoid and over-confidence."""
        return num_classes

    def nll(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The mean binary cross-entropy over every (image, label)."""
        import torch.nn.functional as F

        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())

    def reliability(self, probs: torch.Tensor, labels: torch.Tensor):
        """Every (image, label) probability against whether the label is true."""
        return probs.flatten(), labels.round().flatten().float()

    def calibration_error(self, probs: torch.Tensor, labels: torch.Tensor, bins: int) -> float:
        """The binary ECE over every (image, label) probability."""
        from torchmetrics.functional.classification import binary_calibration_error

        flat = labels.round().int().flatten()
        return binary_calibration_error(probs.detach().float().flatten(), flat, n_bins=bins).item()

    def choose_threshold(self, probs: torch.Tensor, labels: torch.Tensor) -> float | None:
        """The threshold of maximal micro-F1 (``inference.scores.best_threshold``)."""
        from lightning_cls.inference.scores import best_threshold

        return best_threshold(probs, labels)

    def label_counts(self, labels: torch.Tensor, num_classes: int) -> list[int]:
        """Positives per label."""
        return labels.sum(0).round().long().tolist()

    def errors_panel(self, true: torch.Tensor, pred: torch.Tensor, classes: Sequence[str]):
        """Per-label recall and the labels most often missed or falsely predicted."""
        true, pred = true.bool(), pred.bool()
        support = true.sum(0)
        values = ((true & pred).sum(0).double() / support.clamp(min=1)).tolist()
        missed = (true & ~pred).sum(0).tolist()
        false = (~true & pred).sum(0).tolist()
        worst = sorted(range(len(classes)), key=lambda i: -(missed[i] + false[i]))[:5]
        lines = [f"{classes[i]}: {missed[i]} missed, {false[i]} false" for i in worst]
        names = ("per-label recall", "recall")
        return values, support, names, "most wrong labels", lines or ["none"]

    def row(self, indices: list[int], values: list[float], probs: list[float], classes) -> dict:
        return {**super().row(indices, values, probs, classes), "all_probs": probs}

    def csv_header(self, classes: Sequence[str], top_k: int) -> list[str]:
        """file, labels (joined by ``;``: the format a multi-label index reads), one
        ``prob_<class>`` column per class, error (with a rejection rule, answer and the score
        after file)."""
        probs = [f"prob_{name}" for name in classes]
        return ["file", *self._judged_header(), "labels", *probs, "error"]

    def csv_row(self, row: Mapping[str, Any], top_k: int) -> list[str]:
        probs = [f"{p:.6f}" for p in row["all_probs"]]
        return [row["file"], *self._judged_cells(row), ";".join(row["labels"]), *probs, ""]

    def csv_failure(self, path: str, reason: str, classes: Sequence[str], top_k: int) -> list:
        return [path, *[""] * len(self._judged_header()), "", *[""] * len(classes), reason]


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
