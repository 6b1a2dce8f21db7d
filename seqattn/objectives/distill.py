"""Knowledge distillation with a softmax temperature (Hinton et al. 2015), for the labeling and
classification objectives.

A trained *teacher* network's logits, softened by a temperature ``T`` (``softmax(z / T)``: the
larger ``T``, the more of the teacher's ranking of the wrong classes shows), become a second target::

    loss = alpha · T² · KL(softmax(z_teacher / T) ‖ softmax(z_student / T)) + (1 − alpha) · CE(z_student, y)

``T²`` keeps the soft term's gradients on the scale of the hard term's as ``T`` changes. The KL is a
mean over the labeled positions (sequences for classification, labeled tokens for labeling). It
applies to training steps only; validation and test losses stay the plain cross-entropy, comparable
with a student trained without a teacher.

The teacher sees what the student sees: when the student's adapter augments its inputs while
training and exposes them (the adapter hook ``augmented_inputs`` of :mod:`seqattn.model.protocols`, a
dict of batch keys, e.g. the cropped, shifted, noisy waveforms of
:class:`~seqattn.modalities.audio.augment.AugmentedAudioAdapter`), the teacher reads those instead of
the clean batch ("consistent" teaching: the soft targets are the
teacher's view of the very example the student is trained on, so every augmented view adds targets).

The teacher is frozen and in eval mode (no dropout, no augmentation of its own); it is held outside the
student's modules, so it is neither trained, nor in the student's ``state_dict`` / checkpoint, nor
needed to load the student later. It must predict the same labels (names and order) as the student,
with logits of the same shape. Loading a teacher from a checkpoint is the entry point's job
(:func:`seqattn.training.distill.apply_distill`); this module knows no files.

Letters: b batch, l length, c classes.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from seqattn.model.protocols import TrainedModel, network_of


def distillation_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float,
                    keep: torch.Tensor | None = None) -> torch.Tensor:
    """``T² · KL(softmax(teacher / T) ‖ softmax(student / T))``, mean over the positions ``keep``.

    Args:
        student_logits, teacher_logits: ``[..., C]`` (same shape).
        keep: bool ``[...]`` (the logits' shape without ``C``), the positions to average over; None = all.
    """
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"teacher logits {tuple(teacher_logits.shape)} and student logits "
                         f"{tuple(student_logits.shape)} differ in shape")
    c = student_logits.shape[-1]
    s = F.log_softmax(student_logits.float().reshape(-1, c) / temperature, dim=-1)  # [N, C]
    t = F.log_softmax(teacher_logits.float().reshape(-1, c) / temperature, dim=-1)  # [N, C]
    per = (t.exp() * (t - s)).sum(-1)  # [N] KL(teacher ‖ student) per position
    if keep is not None:
        keep = keep.reshape(-1)
        if not bool(keep.any()):
            return student_logits.sum() * 0.0
        per = per[keep]
    return per.mean() * temperature**2


class Distillation:
    """A frozen teacher and how much of its softened output the student learns from.

    Args:
        teacher: the teacher objective (a :class:`~seqattn.model.protocols.TrainedModel`: its ``net`` and
            ``labels``) or network; :attr:`net` is the network that runs.
        temperature: ``T > 0`` of both softmaxes.
        alpha: weight of the soft term in ``[0, 1]`` (1 = the teacher only, 0 = the labels only).
        source: where the teacher came from (shown in logs and ``metrics.json``).
    """

    def __init__(self, teacher: nn.Module, temperature: float = 2.0, alpha: float = 0.5, source: str = "") -> None:
        if not float(temperature) > 0:
            raise ValueError(f"distill.temperature={temperature!r} must be > 0")
        if not 0.0 <= float(alpha) <= 1.0:
            raise ValueError(f"distill.alpha={alpha!r} must be in [0, 1]")
        self.temperature, self.alpha, self.source = float(temperature), float(alpha), source
        self.teacher = teacher.eval()
        self.net = network_of(teacher)  # the teacher's network (the declared hook)
        for param in self.teacher.parameters():
            param.requires_grad_(False)

    @property
    def labels(self) -> list[str] | None:
        labels = self.teacher.labels if isinstance(self.teacher, TrainedModel) else None
        return list(labels) if labels else None

    def check_labels(self, student_labels: Sequence[str] | None, num_outputs: int) -> None:
        """``ValueError`` unless the teacher predicts the student's labels (same names, same order)."""
        n = self.net.head.num_outputs
        if n != num_outputs:
            raise ValueError(f"distill.teacher {self.source} predicts {n} classes, the student {num_outputs}: "
                             "distillation needs the same label set")
        teacher = self.labels
        if student_labels is not None and teacher is not None and list(student_labels) != teacher:
            raise ValueError(f"distill.teacher {self.source} has labels {teacher}, the student {list(student_labels)}: "
                             "distillation needs the same label set in the same order (fix it with data.labels=[...])")

    @torch.no_grad()
    def teacher_logits(self, batch: dict) -> torch.Tensor:
        """The teacher's logits for ``batch`` (moved to the batch's device on first use)."""
        net = self.net
        device = next((v.device for v in batch.values() if isinstance(v, torch.Tensor)), None)
        param = next(net.parameters(), None)
        if device is not None and param is not None and param.device != device:
            net.to(device)
        net.eval()
        return net(batch)["logits"]

    def loss(self, hard: torch.Tensor, student_logits: torch.Tensor, batch: dict,
             keep: torch.Tensor | None = None, inputs: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(alpha · T² · KL + (1 − alpha) · hard, the T²·KL term)`` for one batch; ``inputs``: batch
        keys the student actually read (its augmented inputs), shown to the teacher in their place."""
        teacher = self.teacher_logits({**batch, **inputs} if inputs else batch)
        if teacher.shape != student_logits.shape:
            raise ValueError(f"distill.teacher {self.source} gives logits {tuple(teacher.shape)} for this batch, the "
                             f"student {tuple(student_logits.shape)}: teacher and student must read the same inputs "
                             "the same way (same framing / label set)")
        soft = distillation_kl(student_logits, teacher.to(student_logits.dtype), self.temperature, keep)
        return self.alpha * soft + (1.0 - self.alpha) * hard, soft

    def describe(self) -> dict:
        return {"teacher": self.source, "temperature": self.temperature, "alpha": self.alpha}
