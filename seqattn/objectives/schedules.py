"""Learning-rate schedules, built in ``configure_optimizers`` once the step count is known.

A schedule whose length may change during the run (``budget.seconds``: :class:`seqattn.training.time_budget.TimeBudget`
shortens a run to fit a time budget) is a ``LambdaLR`` whose factor has ``set_total_steps(n)``.
"""

from __future__ import annotations

import math

import torch


class WarmupCosineFactor:
    """The factor of :func:`warmup_cosine` at optimizer step ``step``; ``total_steps`` may be changed during the run
    (:meth:`set_total_steps`): the warm-up (``warmup_frac`` of the total) and the cosine follow the new length."""

    def __init__(self, total_steps: int, warmup_frac: float = 0.05, min_lr_ratio: float = 0.05) -> None:
        self.warmup_frac = float(warmup_frac)
        self.min_lr_ratio = float(min_lr_ratio)
        self.set_total_steps(total_steps)

    def set_total_steps(self, total_steps: int) -> None:
        """The schedule ends (reaches ``min_lr_ratio``) at optimizer step ``total_steps``."""
        if int(total_steps) <= 0:
            raise ValueError(f"total_steps must be positive, got {total_steps}")
        self.total_steps = int(total_steps)
        self.warmup = max(1, int(self.total_steps * self.warmup_frac))

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        progress = min(1.0, (step - self.warmup) / max(1, self.total_steps - self.warmup))
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def warmup_cosine(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_frac: float = 0.05, min_lr_ratio: float = 0.05
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``warmup_frac`` of ``total_steps``, then cosine decay to ``min_lr_ratio``·lr."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupCosineFactor(total_steps, warmup_frac, min_lr_ratio))


def can_set_length(scheduler: object) -> bool:
    """Whether :func:`set_schedule_length` can change this scheduler's length (a ``LambdaLR`` of
    :class:`WarmupCosineFactor`-like factors)."""
    lambdas = getattr(scheduler, "lr_lambdas", None)
    return isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR) and bool(lambdas) and all(
        hasattr(f, "set_total_steps") for f in lambdas)


def set_schedule_length(scheduler: torch.optim.lr_scheduler.LambdaLR, total_steps: int) -> None:
    """Make ``scheduler`` end at optimizer step ``total_steps``, from the step it is at: the learning rate of the
    next optimizer step already follows the new length (``LambdaLR`` would apply it one step late)."""
    if not can_set_length(scheduler):
        raise ValueError(f"{type(scheduler).__name__} cannot change its length (needs LambdaLR factors with "
                         "set_total_steps, as seqattn.objectives.warmup_cosine builds)")
    for factor in scheduler.lr_lambdas:
        factor.set_total_steps(total_steps)
    for group, base, factor in zip(scheduler.optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
        group["lr"] = base * factor(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]
