"""Distillation from a teacher checkpoint: ``python -m seqattn.run ... distill.teacher=PATH.ckpt``.

``distill.teacher`` is a checkpoint written by ``seqattn.run`` (any network: a large attention model,
another encoder, ...) trained on the same labels; ``distill.temperature`` (T) softens both softmaxes
and ``distill.alpha`` weighs the teacher's term against the labels' (see
:mod:`seqattn.objectives.distill`). The teacher is rebuilt from its checkpoint alone
(:func:`~seqattn.training.checkpoint.build_model`), frozen and kept in eval mode; the student's
checkpoint holds no trace of it, so the student loads and predicts without the teacher's file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from seqattn.objectives.distill import Distillation
from seqattn.training.checkpoint import build_model, read_checkpoint

log = logging.getLogger("seqattn.training.distill")


@dataclass(frozen=True)
class DistillOptions:
    """``distill.*`` (defaults in conf/config.yaml, built by ``seqattn.run``)."""

    teacher: str | None  # a seqattn checkpoint trained on the same labels; None = no distillation
    temperature: float  # T > 0 of both softmaxes
    alpha: float  # weight of the teacher's term, in [0, 1]


def load_teacher(path: str | Path, temperature: float, alpha: float) -> Distillation:
    """The :class:`~seqattn.objectives.distill.Distillation` of a teacher checkpoint (``weights_only``)."""
    teacher = build_model(read_checkpoint(path))  # eval mode
    return Distillation(teacher, temperature=temperature, alpha=alpha, source=str(path))


def apply_distill(model: nn.Module, options: DistillOptions) -> dict[str, Any] | None:
    """``options`` (``distill.*``) applied to a freshly built objective. Returns a summary for
    ``metrics.json`` (None without a teacher)."""
    path = options.teacher
    if not path:
        return None
    if not callable(getattr(model, "set_distillation", None)):
        raise ValueError(f"distill.teacher is set, but {type(model).__name__} has no distillation; it is an option "
                         "of the classification and labeling objectives")
    distillation = load_teacher(path, options.temperature, options.alpha)
    model.set_distillation(distillation)
    n = sum(p.numel() for p in distillation.teacher.parameters())
    log.info("distilling from %s (%s encoder, %.1fk parameters), T=%g, alpha=%g", path,
             type(distillation.net.encoder).__name__, n / 1e3,
             distillation.temperature, distillation.alpha)
    return {**distillation.describe(), "teacher_parameters": n}
