"""Knowledge distillation (Hinton et al. 2015, "Distilling the Knowledge in a Neural Network").

The student learns from a blend of the labels and a teacher's temperature-softened outputs::

    loss = alpha * T^2 * soft(student / T, teacher / T) + (1 - alpha) * task loss

``soft`` is the task's (``TrainingTask.distill_loss``): KL(teacher_T || student_T) over the
softmax for one label per image; for multi-label models, one sigmoid per class, BCE against
the teacher's softened probabilities. T^2 keeps the soft term's gradients at the scale of the
task loss's as T changes (Hinton et al., section 2).

The teacher is any model predict can load: a ``.ckpt``/``model_weights.pt`` (eager PyTorch),
an ``.onnx`` file (ONNX Runtime on the CPU), or a trusted TorchScript/``.pt2`` file
(``trust_teacher=True``: those can run code when loaded). It runs in eval mode without
gradients on exactly the batch the student sees in ``training_step``: after the DataModule's
batched augmentation and after MixUp/CutMix, so its soft targets describe the mixed images
(exact, no target mixing). Under DDP each rank runs it on its own shard.

Why no cache of teacher outputs: with random crops, flips, RandAugment or MixUp no two epochs
show the teacher the same pixels, so a per-image cache would hand the student targets for
images it is not seeing; where training has no random augmentation the teacher's forward is
one inference pass of a frozen network per step, and skipping it is not worth a cache that is
wrong the moment augmentation is turned on.

The teacher is held outside the module tree (not a submodule): it is not saved in checkpoints,
not averaged by EMA, not wrapped by DDP, and the student exports like any model. It is loaded
by ``prepare`` (the module's ``setup("fit")``), on every process, and dropped when the module is
pickled or deep-copied (``ddp_spawn``, ``EMAWeightAveraging``'s copy).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from lightning_cls.inference.flags import check_trust_flag

log = logging.getLogger(__name__)
_WARNED: set[str] = set()  # teachers already warned about (a copy of the Distiller loads again)

if TYPE_CHECKING:
    from lightning_cls.inference.runtimes import Runtime
    from lightning_cls.inference.spec import InputSpec
    from lightning_cls.training.tasks import TrainingTask


def softmax_distill_loss(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float
) -> torch.Tensor:
    """KL(softmax(teacher / T) || softmax(student / T)) * T^2, averaged over the batch."""
    t = temperature
    student = F.log_softmax(student_logits.float() / t, dim=1)  # (B, K)
    teacher = F.log_softmax(teacher_logits.float() / t, dim=1)  # (B, K)
    return F.kl_div(student, teacher, log_target=True, reduction="batchmean") * t * t


def sigmoid_distill_loss(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float
) -> torch.Tensor:
    """Multi-label: BCE(sigmoid(student / T), sigmoid(teacher / T)) * T^2, averaged over
    images and labels (the task's BCE reduction); its gradient is the per-label KL's."""
    t = temperature
    target = torch.sigmoid(teacher_logits.float() / t)  # (B, K) soft multi-hot
    return F.binary_cross_entropy_with_logits(student_logits.float() / t, target) * t * t


class Distiller:
    """A teacher and the blend of its soft targets with the task loss.

    ``teacher``: the teacher's file (``.ckpt``, ``model_weights.pt``, ``.onnx``, or with
    ``trust_teacher=True`` a TorchScript/``.pt2`` export). ``alpha``: the soft term's weight
    (1: teacher only, 0: labels only). ``temperature``: T > 0, the softening of both outputs.
    """

    def __init__(
        self,
        teacher: str | Path,
        alpha: float = 0.5,
        temperature: float = 4.0,
        trust_teacher: bool = False,
    ):
        # Hydra reads distill.alpha=true as True, an int to isinstance: refused, not taken as 1.
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
            raise ValueError(
                f"distill.alpha={alpha!r} is not a weight from 0 to 1; set distill.alpha to the "
                "soft targets' share of the loss, e.g. distill.alpha=0.5."
            )
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or not 0 < temperature < math.inf  # inf softens every output to uniform
        ):
            raise ValueError(
                f"distill.temperature={temperature!r} must be a number above 0 and finite; e.g. "
                "distill.temperature=4 (1 = the teacher's own probabilities)."
            )
        trust_teacher = check_trust_flag("distill.trust_teacher", trust_teacher)
        self.teacher = Path(teacher)
        if not self.teacher.is_file():
            raise FileNotFoundError(
                f"distill.teacher={teacher} does not exist; give a trained checkpoint (.ckpt) "
                "or an exported model (.onnx, model_weights.pt)."
            )
        self.alpha, self.temperature = float(alpha), float(temperature)
        self.trust_teacher = trust_teacher
        self._runtime: Runtime | None = None
        self._renormalize: tuple[torch.Tensor, torch.Tensor] | None = None

    def __repr__(self) -> str:
        return f"Distiller({self.teacher}, alpha={self.alpha}, temperature={self.temperature})"

    def __getstate__(self) -> dict[str, Any]:
        # The loaded teacher stays behind (an ONNX session does not pickle; a copy for EMA or a
        # spawned rank need not carry its weights): prepare() loads it again where it trains.
        return {**self.__dict__, "_runtime": None, "_renormalize": None}

    @property
    def ready(self) -> bool:
        return self._runtime is not None

    def prepare(self, student: InputSpec) -> None:
        """Load the teacher on the CPU and check it against the ``student``'s spec: the same
        classes in the same order, task, channels and image size (a one-line ``ValueError``
        naming both otherwise). A teacher normalized differently gets the student's batch
        renormalized to its own mean/std."""
        from lightning_cls.inference.runtimes import open_runtime

        if self._runtime is not None:
            return
        runtime = open_runtime(
            self.teacher, trust_artifact=self.trust_teacher, threads=torch.get_num_threads()
        )
        check_teacher(runtime.spec, student, self.teacher)
        warn_label_smoothing(runtime.spec, self.teacher)
        self._renormalize = renormalization(student, runtime.spec)
        self._runtime = runtime

    @torch.no_grad()
    def teacher_logits(self, x: torch.Tensor) -> torch.Tensor:
        """The teacher's logits (B, K) float32 on ``x``'s device for the student's normalized
        batch ``x`` (B, C, H, W); no gradient reaches the teacher."""
        if self._runtime is None:
            raise RuntimeError(
                "Distiller.prepare(student_spec) loads the teacher before teacher_logits "
                "(ClassificationModule.setup does it when fit starts)."
            )
        if self._renormalize is not None:
            scale, shift = (t.to(x.device) for t in self._renormalize)
            x = x * scale + shift  # (B, C, H, W) in the teacher's normalization
        runtime = self._runtime
        if runtime.arrays == "numpy":  # ONNX Runtime/OpenVINO: CPU numpy in and out
            out = runtime(x.detach().float().cpu().contiguous().numpy())
            return torch.from_numpy(out).float().to(x.device)
        if str(runtime.device) != str(x.device):  # first batch on an accelerator: follow it
            runtime = self._runtime = self._reopen(x.device)
        return runtime(x).float()  # (B, K)

    def _reopen(self, device: torch.device) -> Runtime:
        from lightning_cls.inference.runtimes import open_runtime

        return open_runtime(self.teacher, trust_artifact=self.trust_teacher, device=str(device))

    def blend(
        self, task: TrainingTask, x: torch.Tensor, logits: torch.Tensor, task_loss: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(alpha * soft + (1 - alpha) * task_loss, soft)`` for the student's ``logits`` on
        batch ``x``; ``soft`` is the task's distillation loss against the teacher's logits."""
        soft = task.distill_loss(logits, self.teacher_logits(x), self.temperature)
        return self.alpha * soft + (1.0 - self.alpha) * task_loss, soft.detach()


def warn_label_smoothing(teacher: InputSpec, path: Path) -> bool:
    """Warn once per teacher file trained with label smoothing: smoothing erases what the
    wrong classes' logits say about similarity, the very thing a student learns from
    (Mueller et al. 2019, "When does label smoothing help?"). True when it warned."""
    if teacher.task["label_smoothing"] <= 0 or str(path) in _WARNED:
        return False
    _WARNED.add(str(path))
    log.warning(
        "distill.teacher=%s was trained with label_smoothing=%g: a label-smoothed teacher's soft "
        "targets carry less about how classes resemble each other, and make a worse teacher "
        "(Mueller et al. 2019). Prefer a teacher trained with label_smoothing=0.",
        path,
        teacher.task["label_smoothing"],
    )
    return True


def check_teacher(teacher: InputSpec, student: InputSpec, path: Path) -> None:
    """A ``ValueError`` naming both sides when the teacher cannot teach this student."""
    where = f"distill.teacher={path}"
    if list(teacher.classes) != list(student.classes):
        raise ValueError(
            f"{where} predicts {len(teacher.classes)} classes {_names(teacher.classes)} but the "
            f"student learns {len(student.classes)} classes {_names(student.classes)}; distil "
            "from a teacher trained on the same classes, in the same order."
        )
    taught, learning = teacher.task["name"], student.task["name"]
    if taught != learning:
        raise ValueError(
            f"{where} is a task={taught} model but the student is task={learning}; "
            f"train the student with task={taught} or use a {learning} teacher."
        )
    for key in ("num_channels", "image_size"):
        if getattr(teacher, key) != getattr(student, key):
            raise ValueError(
                f"{where} takes {key}={getattr(teacher, key)} but the student's data has "
                f"{key}={getattr(student, key)}; give the student the teacher's input "
                f"(data.{key}={getattr(teacher, key)}) or use a teacher trained on it."
            )


def renormalization(
    student: InputSpec, teacher: InputSpec
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(scale, shift)``, each (1, C, 1, 1), mapping a batch normalized with the student's
    mean/std to the teacher's: ``x_t = x_s * std_s / std_t + (mean_s - mean_t) / std_t``;
    None when both normalize alike."""
    if student.mean == teacher.mean and student.std == teacher.std:
        return None
    mean_s, std_s, mean_t, std_t = (
        torch.tensor(v, dtype=torch.float32).view(1, -1, 1, 1)
        for v in (student.mean, student.std, teacher.mean, teacher.std)
    )
    return std_s / std_t, (mean_s - mean_t) / std_t


def _names(classes) -> str:
    shown = ", ".join(list(classes)[:6])
    return f"[{shown}{', ...' if len(classes) > 6 else ''}]"
