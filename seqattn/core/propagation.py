"""Personalised-PageRank propagation of token vectors over the attention graph (APPNP's output step).

Letters: b batch, l length, d width, e edges (over the flattened batch ``b * L + l``).

``z_0 = x``, ``z_{t+1} = (1 - alpha) Â z_t + alpha x``, ``t < steps``, with ``Â = D^-1/2 A D^-1/2`` the
symmetrically normalised adjacency of ``edge_index`` plus a self-loop on every real token that lacks
one (Klicpera et al. 2019, "Predict then propagate"). ``alpha`` is the teleport (restart)
probability: each token keeps that share of its own vector, so many steps do not wash it out. Used
by :class:`~seqattn.core.encoder.Encoder` (``output_propagation``) after its last layer: with a linear
head this propagates the predictions, which lets few labelled tokens label the graph around them.
"""

from __future__ import annotations

import torch


def ppr_propagate(x: torch.Tensor, edge_index: torch.Tensor, mask: torch.Tensor | None, steps: int,
                  alpha: float) -> torch.Tensor:
    """``x [B, L, D]`` -> ``[B, L, D]``: ``steps`` personalised-PageRank steps over ``edge_index [2, E]``
    (source -> target over flattened ``b * L + l``; messages flow to the target), ``mask [B, L]`` bool
    (True = real token; padding rows stay as they are and send nothing). ``steps = 0`` returns ``x``."""
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1] (the teleport probability), got {alpha!r}")
    if steps == 0:
        return x
    b, l, d = x.shape
    n_total = b * l
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must be [2, E], got shape {tuple(edge_index.shape)}")
    real = torch.ones(n_total, dtype=torch.bool, device=x.device) if mask is None else mask.reshape(-1)
    src, dst = edge_index[0], edge_index[1]
    keep = real[src] & real[dst] & (src != dst)  # self-loops are added once below
    nodes = torch.nonzero(real).squeeze(1)
    src = torch.cat([src[keep], nodes])
    dst = torch.cat([dst[keep], nodes])
    deg = torch.zeros(n_total, dtype=x.dtype, device=x.device).index_add_(0, dst, torch.ones_like(dst, dtype=x.dtype))
    weight = (deg[src] * deg[dst]).clamp_min(1.0).rsqrt().unsqueeze(1)  # [E', 1]
    flat = x.reshape(n_total, d)
    z = flat
    for _ in range(steps):
        z = (1.0 - alpha) * torch.zeros_like(flat).index_add_(0, dst, z.index_select(0, src) * weight) + alpha * flat
    if mask is not None:
        z = torch.where(real.unsqueeze(1), z, flat)  # padding rows unchanged
    return z.reshape(b, l, d)
