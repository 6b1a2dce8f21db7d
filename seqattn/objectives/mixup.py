"""Mixup for sequence classification (Zhang et al. 2018), on the adapter's tokens.

Each training batch is mixed with a permutation of itself: ``x' = λ x + (1 − λ) x[perm]`` on the
adapter's token vectors ``[B, L, D]`` (before any subsampling stem and global token: for clips, the
log-mel frames after SpecAugment), the mask the union of both items' real tokens, and the loss
``λ CE(logits, y) + (1 − λ) CE(logits, y[perm])``. ``λ ~ Beta(α, α)``, folded to ``max(λ, 1 − λ)`` so
each item's own label carries the larger weight (the training accuracy counts it; the loss is the
same in distribution). Modality-free: any adapter whose tokens are plain vectors (clips, words,
pixels); tokens with structure (an attention mask, graph edges or edge features) are refused, since
two items' structures do not mix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from seqattn.core.tokens import Tokens


@dataclass(frozen=True)
class Mix:
    """One batch's mix: ``lam`` (the weight of each item's own tokens and label, in [0.5, 1]) and
    ``perm`` ``[B]`` long (the partner of item ``i`` is ``perm[i]``)."""

    lam: float
    perm: torch.Tensor

    def tokens(self, tokens: Tokens) -> Tokens:
        """``tokens`` mixed with their permutation: ``x [B, L, D]`` → ``λ x + (1 − λ) x[perm]``; ``mask [B, L]``
        → ``mask | mask[perm]``. ``ValueError`` for tokens with structure (``attn_mask``, ``edge_index``,
        ``edge_bias``) or a batch size other than ``len(perm)``."""
        structured = [n for n in ("attn_mask", "edge_index", "edge_bias") if getattr(tokens, n) is not None]
        if structured:
            raise ValueError(f"mixup mixes plain token vectors; these tokens carry {structured} (a graph or an "
                             "attention mask), which two items cannot share: set objective.mixup=0")
        if tokens.x.shape[0] != self.perm.shape[0]:
            raise ValueError(f"mixup: tokens x {tuple(tokens.x.shape)} for a batch of {self.perm.shape[0]} items")
        x = self.lam * tokens.x + (1.0 - self.lam) * tokens.x[self.perm]
        mask = None if tokens.mask is None else tokens.mask | tokens.mask[self.perm]
        return tokens.replace(x=x, mask=mask)

    def cross_entropy(self, logits: torch.Tensor, labels: torch.Tensor, **kwargs) -> torch.Tensor:
        """``λ CE(logits, labels) + (1 − λ) CE(logits, labels[perm])`` for ``logits [B, C]``, ``labels [B]``
        (``kwargs`` go to ``F.cross_entropy``: label smoothing)."""
        own = F.cross_entropy(logits, labels, **kwargs)
        other = F.cross_entropy(logits, labels[self.perm], **kwargs)
        return self.lam * own + (1.0 - self.lam) * other


def draw_mix(alpha: float, batch_size: int, device: torch.device | str = "cpu") -> Mix:
    """``λ ~ Beta(alpha, alpha)`` folded to ``max(λ, 1 − λ)`` and a random permutation of ``batch_size``
    items, from torch's global generator (seeded runs repeat)."""
    if not alpha > 0:
        raise ValueError(f"mixup alpha must be > 0, got {alpha!r}")
    lam = float(torch.distributions.Beta(float(alpha), float(alpha)).sample())
    return Mix(max(lam, 1.0 - lam), torch.randperm(batch_size, device=device))
