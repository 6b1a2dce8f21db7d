"""Learning-rate schedules, built in ``configure_optimizers`` once the step count is known."""

from __future__ import annotations

import math

import torch


def warmup_cosine(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_frac: float = 0.05, min_lr_ratio: float = 0.05
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``warmup_frac`` of ``total_steps``, then cosine decay to ``min_lr_ratio``·lr."""
    if total_steps <= 0:
        raise ValueError(f"total_steps must be positive, got {total_steps}")
    warmup = max(1, int(total_steps * warmup_frac))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
