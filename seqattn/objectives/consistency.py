"""Consistency between stochastic views of the same batch, over every real token (labeled or not).

GRAND's consistency regularisation (Feng et al. 2020, "Graph Random Neural Network"): the network is run
``S`` times on the same batch, each run with its own dropout draws; each view's class probabilities
``p_s [..., C]`` are pulled towards the sharpened mean ``q = norm(p̄^{1/T})`` (no gradient through
``q``). Unlabeled tokens get a training signal: few labels spread to the tokens whose predictions agree.

Letters: c classes; ``...`` any leading shape (``[B, L]`` for a label per token).
"""

from __future__ import annotations

import torch


def sharpened_consistency(views: list[torch.Tensor], mask: torch.Tensor, temperature: float = 0.5) -> torch.Tensor:
    """``views``: S >= 2 logits ``[..., C]`` of the same batch (different dropout draws); ``mask [...]`` bool (True
    = a real token, counted); ``temperature`` T in ``(0, 1]`` (1 = the plain mean, smaller = sharper).

    Returns the scalar ``mean_s mean_{tokens of mask} ||p_s - q||²`` with ``p_s = softmax(view_s)``,
    ``q = p̄^{1/T} / Σ_c p̄^{1/T}``, ``p̄ = mean_s p_s``, and ``q`` detached (the target, not a path for
    gradients). A mask with no token gives 0 (with a gradient of zeros)."""
    if len(views) < 2:
        raise ValueError(f"consistency needs at least 2 views of the batch, got {len(views)}")
    shape = views[0].shape
    if any(v.shape != shape for v in views):
        raise ValueError(f"every view must have the same shape, got {[tuple(v.shape) for v in views]}")
    if mask.dtype != torch.bool or tuple(mask.shape) != tuple(shape[:-1]):
        raise ValueError(f"mask must be bool {tuple(shape[:-1])} (the views' leading shape), got {mask.dtype} "
                         f"{tuple(mask.shape)}")
    if not 0.0 < temperature <= 1.0:
        raise ValueError(f"temperature must lie in (0, 1], got {temperature!r}")
    probs = [v.float().softmax(-1) for v in views]  # S x [..., C]
    mean = torch.stack(probs).mean(0)  # [..., C]
    sharp = mean.pow(1.0 / temperature)
    target = (sharp / sharp.sum(-1, keepdim=True)).detach()  # [..., C]
    per_token = torch.stack([(p - target).pow(2).sum(-1) for p in probs]).mean(0)  # [...]
    if not bool(mask.any()):
        return per_token.sum() * 0.0
    return per_token[mask].mean()
